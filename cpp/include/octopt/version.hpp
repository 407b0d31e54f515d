#pragma once
// The single source of the version: pyproject.toml and CMakeLists.txt read it from here.
#define OCTOPT_VERSION_MAJOR 0
#define OCTOPT_VERSION_MINOR 1
#define OCTOPT_VERSION_PATCH 0
#define OCTOPT_VERSION "0.1.0"
