// Helpers of the dashboard tests: where artifacts go, and /api/status
// checked against its documented schema (validate_status.py, jsonschema).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace cohort::dashboard::testing {

// A file under the test's build directory (kept after the test: the
// screenshot and reports are artifacts to look at).
inline std::string artifact_path(const std::string& name) { return std::string(ARTIFACT_DIR) + "/" + name; }

// Validates `status_json` against cohort/dashboard/status.schema.json.
inline void expect_valid_status(const std::string& status_json) {
  const std::string path = artifact_path("status_under_test.json");
  std::ofstream(path) << status_json;
  const std::string command =
      std::string(PYTHON3_PATH) + " " + VALIDATE_SCRIPT_PATH + " " + STATUS_SCHEMA_PATH + " " + path;
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << command;
  ASSERT_NE(WEXITSTATUS(status), 77) << "python3-jsonschema is missing: run scripts/bootstrap.sh";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "/api/status does not match its schema (errors above): " << status_json;
}

}  // namespace cohort::dashboard::testing
