#!/usr/bin/env bash
# `trainer --version`: exit 0 and one line each for the version (CMake's project version), the git
# commit it was built from (in the source tree's history, where it is a git checkout), the build,
# CUDA (compiled in or not), and the MPI and HDF5 libraries it runs with.
source "$(dirname "$0")/lib.sh"
"$TRAINER" --version > version.out 2> version.err || { cat version.out version.err; fail "exit $?"; }
cat version.out
[ ! -s version.err ] || { cat version.err; fail "--version wrote to stderr"; }
want=$(sed -nE 's/^project\(trainer .*VERSION ([0-9.]+)\).*/\1/p' "$SRC/CMakeLists.txt")
grep -qx "trainer $want" version.out || fail "no 'trainer $want' line"
# The commit the binary was built from: one of the source tree's (HEAD or, when commits came after
# the build, an ancestor of it).
if git -C "$SRC" rev-parse HEAD > /dev/null 2>&1; then
  built=$(sed -nE 's/^commit     ([0-9a-f]{12})( .*)?$/\1/p' version.out)
  [ -n "$built" ] && git -C "$SRC" merge-base --is-ancestor "$built" HEAD ||
    fail "the commit line names no commit of the source tree's history"
fi
grep -q "^build      [A-Za-z]*, [A-Za-z]* [0-9]" version.out || fail "no build line"
grep -q "^cuda       \(CUDA backend compiled in\|no CUDA backend\)" version.out || fail "no cuda line"
grep -q "^mpi        .* (MPI [0-9]\.[0-9])$" version.out || fail "no mpi line"
grep -q "^hdf5       [0-9]*\.[0-9]*\.[0-9]* (built against [0-9.]*)$" version.out || fail "no hdf5 line"
"$TRAINER" version | diff - version.out || fail "'trainer version' differs from --version"
echo "PASS: trainer --version"
