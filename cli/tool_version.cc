// File: tool_version.cc — the build's release and commit (tool_version.h). The one file
// that includes the generated header, so a new commit recompiles only this.
#include "cli/tool_version.h"

#include "dsaf_build_version.h"

namespace dsaf::cli {

std::string tool_version() { return DSAF_TOOL_VERSION; }
std::string tool_commit() { return DSAF_TOOL_COMMIT; }

}  // namespace dsaf::cli
