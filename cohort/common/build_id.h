// Which build of cohort this is: an id compiled in, equal for two builds
// from the same commit and tree, compiler, build type, flags and optional
// parts (cmake/build_id.cmake). `cohortrun --check` compares it across a
// job's hosts, where a mismatch would mean ranks disagreeing on the wire.
#pragma once

namespace cohort {

// 16 hex digits, e.g. "3f09a1c2d4b5e6f7".
const char* build_id();
// What the id was made from, for people: "commit 17fb137a2b3c, GNU 12.2.0, RelWithDebInfo".
const char* build_description();
// LibTorch's version where the build has cohort/torch, else "none".
const char* libtorch_version();

}  // namespace cohort
