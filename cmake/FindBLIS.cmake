# FindBLIS: locate BLIS (https://github.com/flame/blis).
#
# Debian ships BLIS without a pkg-config file, in flavour-specific folders
# (libblis-openmp-dev: /usr/include/x86_64-linux-gnu/blis-openmp/blis.h and
# /usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so). We prefer the OpenMP
# flavour, because libtensor's own kernels use OpenMP and one thread setting
# must govern both.
#
# Defines the imported target BLIS::BLIS and BLIS_FOUND, BLIS_INCLUDE_DIR,
# BLIS_LIBRARY. Set BLIS_ROOT to point at a custom installation.

set(_blis_multiarch "${CMAKE_LIBRARY_ARCHITECTURE}")
if(NOT _blis_multiarch)
  set(_blis_multiarch "x86_64-linux-gnu")
endif()

find_path(BLIS_INCLUDE_DIR blis.h
  HINTS ${BLIS_ROOT} ENV BLIS_ROOT
  PATH_SUFFIXES include include/blis
                "include/${_blis_multiarch}/blis-openmp"
                "${_blis_multiarch}/blis-openmp"
                include/blis-openmp blis-openmp
  PATHS /usr/include /usr/local/include)

find_library(BLIS_LIBRARY NAMES blis
  HINTS ${BLIS_ROOT} ENV BLIS_ROOT
  PATH_SUFFIXES "${_blis_multiarch}/blis-openmp" blis-openmp lib lib64
  PATHS /usr/lib /usr/local/lib
  NO_DEFAULT_PATH)
if(NOT BLIS_LIBRARY)
  find_library(BLIS_LIBRARY NAMES blis)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(BLIS
  REQUIRED_VARS BLIS_LIBRARY BLIS_INCLUDE_DIR
  FAIL_MESSAGE "BLIS not found: install the Debian package libblis-openmp-dev (apt-get install libblis-openmp-dev)")

if(BLIS_FOUND AND NOT TARGET BLIS::BLIS)
  add_library(BLIS::BLIS UNKNOWN IMPORTED)
  set_target_properties(BLIS::BLIS PROPERTIES
    IMPORTED_LOCATION "${BLIS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${BLIS_INCLUDE_DIR}")
endif()
mark_as_advanced(BLIS_INCLUDE_DIR BLIS_LIBRARY)
