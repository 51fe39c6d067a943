# cmake -DFILE=<binary> -DRPATH=<runpath> -P set_rpath.cmake: replaces the
# binary's RUNPATH (setup.py: the installed package's files find each other
# through $ORIGIN, not through the build directory's absolute paths).
file(RPATH_SET FILE "${FILE}" NEW_RPATH "${RPATH}")
