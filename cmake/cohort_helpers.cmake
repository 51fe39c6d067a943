# Build helpers shared by every folder of cohort.

# cohort_install_headers(<header>...): installs the public headers of the
# calling folder under include/, at the path they have in the source tree
# (cohort/torch/core/runtime.h -> include/cohort/torch/core/runtime.h).
# A header not listed is internal: it is never installed, and no installed
# header may include it (tests/package/public_headers_test.sh checks).
function(cohort_install_headers)
  file(RELATIVE_PATH dir ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  install(FILES ${ARGN} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${dir})
endfunction()
