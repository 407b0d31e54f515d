# Cross-compiling for 64-bit ARM Linux with Debian's GNU cross compiler (g++-aarch64-linux-gnu), so that the
# C++ tests and the encoder check of the NEON and portable kernels run under qemu-aarch64 on an x86 machine
# (tests/cpp/test_cross.py). The compilers can be overridden: -DOCTOPT_CROSS_PREFIX=aarch64-linux-gnu-.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(OCTOPT_CROSS_PREFIX "aarch64-linux-gnu-" CACHE STRING "Prefix of the aarch64 cross tools")
set(CMAKE_C_COMPILER ${OCTOPT_CROSS_PREFIX}gcc)
set(CMAKE_CXX_COMPILER ${OCTOPT_CROSS_PREFIX}g++)
# Debian's multiarch sysroot of the cross toolchain; qemu-aarch64 -L takes the same folder.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# CTest (and add_test COMMANDs naming a target) run the programs through qemu-user.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
