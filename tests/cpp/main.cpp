// Runs every registered test, or those whose name contains argv[1].
#include <string>

#include "harness.hpp"

int main(int argc, char** argv) { return octopt_test::run_all(argc > 1 ? argv[1] : ""); }
