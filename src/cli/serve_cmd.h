// lumen serve: the OpenAI-compatible HTTP server (src/server) in front of the engine.
#pragma once

namespace lumen::cli {

// argv[first] is the first argument after "serve".
int cmd_serve(int argc, char** argv, int first);

}  // namespace lumen::cli
