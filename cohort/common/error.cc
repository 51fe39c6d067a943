// The error classes are header-only; this file anchors their vtables in the
// library so that a throw in one shared object is caught by type in another.
#include "cohort/common/error.h"
