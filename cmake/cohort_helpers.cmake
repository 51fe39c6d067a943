# Build helpers shared by every folder of cohort.

# cohort_install_headers(<header>...): installs the public headers of the
# calling folder under include/, at the path they have in the source tree
# (cohort/torch/core/runtime.h -> include/cohort/torch/core/runtime.h), as
# install component "headers". A header not listed is internal: it is never
# installed, and no installed header may include it. The declared set is
# recorded (COHORT_PUBLIC_HEADERS) for the layering test (tests/layering),
# which installs the component alone and compares.
function(cohort_install_headers)
  file(RELATIVE_PATH dir ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  install(FILES ${ARGN} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${dir} COMPONENT headers)
  foreach(header ${ARGN})
    set_property(GLOBAL APPEND PROPERTY COHORT_PUBLIC_HEADERS ${dir}/${header})
  endforeach()
endfunction()

# cohort_write_build_graph(<dir>): writes what the layering test reads, once
# the whole project is configured:
#   <dir>/links.tsv           one line per target: name, type, source folder
#                             (relative), and the targets and libraries it
#                             links (LINK_LIBRARIES and
#                             INTERFACE_LINK_LIBRARIES, aliases resolved),
#                             separated by ";"
#   <dir>/public_headers.txt  the headers cohort_install_headers declared
# Read at configure time rather than through CMake's file API, whose query
# must exist before the first configure.
function(cohort_write_build_graph dir)
  set(pending ${PROJECT_SOURCE_DIR})
  set(targets)
  while(pending)
    list(POP_FRONT pending folder)
    get_property(here DIRECTORY ${folder} PROPERTY BUILDSYSTEM_TARGETS)
    get_property(below DIRECTORY ${folder} PROPERTY SUBDIRECTORIES)
    list(APPEND targets ${here})
    list(APPEND pending ${below})
  endwhile()
  set(lines)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    get_target_property(source ${target} SOURCE_DIR)
    file(RELATIVE_PATH source ${PROJECT_SOURCE_DIR} ${source})
    set(links)
    foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(items ${target} ${property})
      if(NOT items)
        continue()
      endif()
      foreach(item ${items})
        # Links made from another folder are bracketed by "::@(id)" markers;
        # a static library's private links are exported as $<LINK_ONLY:x>.
        if(item MATCHES "^::@")
          continue()
        endif()
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
        if(TARGET ${item})
          get_target_property(aliased ${item} ALIASED_TARGET)
          if(aliased)
            set(item ${aliased})
          endif()
        endif()
        list(APPEND links ${item})
      endforeach()
    endforeach()
    list(REMOVE_DUPLICATES links)
    list(JOIN links "," links)
    list(APPEND lines "${target}\t${type}\t${source}\t${links}")
  endforeach()
  list(JOIN lines "\n" text)
  file(WRITE ${dir}/links.tsv "${text}\n")
  get_property(headers GLOBAL PROPERTY COHORT_PUBLIC_HEADERS)
  list(SORT headers)
  list(JOIN headers "\n" text)
  file(WRITE ${dir}/public_headers.txt "${text}\n")
endfunction()

# cohort_unity_build(<target>): compiles <target>'s sources as unity batches
# (COHORT_UNITY_BUILD, COHORT_UNITY_BATCH_SIZE) when it has more than one.
# Its files must then not define the same name twice at namespace scope,
# anonymous namespaces included: the tests put each file's names in a
# namespace named after the file.
function(cohort_unity_build target)
  get_target_property(sources ${target} SOURCES)
  list(LENGTH sources count)
  if(COHORT_UNITY_BUILD AND count GREATER 1)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${COHORT_UNITY_BATCH_SIZE})
  endif()
endfunction()
