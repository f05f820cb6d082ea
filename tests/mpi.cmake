# MpiCommunicator's collectives under mpiexec against closed forms (all-to-all with uneven and
# zero counts, the counts exchange), and the EP / expert-DP groups of the rank grid.
trainer_mpi_gtest(mpi_alltoall_test NP 3 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/mpi_alltoall_test.cpp
                  LIBS trainer_mpi TIMEOUT 60)
# MpiCommunicator's messages past its most elements per message (MPI's int counts), set small:
# every collective and send/recv in pieces against closed forms.
trainer_mpi_gtest(mpi_large_messages_test NP 3
                  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/mpi_large_messages_test.cpp
                  LIBS trainer_mpi TIMEOUT 60)
# The device groups' communicator sharing (device_groups.h) against the MPI splits of every layout
# of 4 ranks: shared exactly when the groups are congruent.
trainer_mpi_gtest(mpi_device_groups_test NP 4
                  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/mpi_device_groups_test.cpp
                  LIBS trainer_mpi TIMEOUT 60)
# The watchdog's asynchronous error sources (NCCL's communicators in training) with a fake one:
# an error ends the rank at once with its line; a source is asked only while registered.
trainer_gtest(watchdog_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/watchdog_test.cpp
              LIBS trainer_mpi TIMEOUT 60)
# SelfCommunicator (a group of one member; the device groups of one rank): copies through its copy
# function with the closed forms' pointers and sizes, skipped send/recv sides, refused peers.
trainer_gtest(self_communicator_test
              SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/self_communicator_test.cpp
              LIBS trainer_common TIMEOUT 60)
# StagedCommunicator (Distributed.gpu_collectives=mpi) with a host-memory staging: every
# collective in pieces of a few bytes against closed forms.
trainer_mpi_gtest(staged_communicator_test NP 3
                  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/staged_communicator_test.cpp
                  LIBS trainer_mpi TIMEOUT 60)
# The same on NcclCommunicator (device memory; GPU label, skipped without a GPU): the first
# min(2, GPUs) ranks take part.
if(TRAINER_WITH_CUDA)
  trainer_mpi_gtest(nccl_alltoall_test NP 2
                    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/nccl_alltoall_test.cpp
                    LIBS trainer_mpi TIMEOUT 120)
  set_tests_properties(nccl_alltoall_test PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77)
endif()
