# MpiCommunicator's collectives under mpiexec against closed forms (all-to-all with uneven and
# zero counts, the counts exchange), and the EP / expert-DP groups of the rank grid.
trainer_mpi_gtest(mpi_alltoall_test NP 3 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/mpi_alltoall_test.cpp
                  LIBS trainer_mpi TIMEOUT 60)
