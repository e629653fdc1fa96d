// The gridtrain program's command line (kept free of torch so that main compiles fast).
#pragma once

namespace gridtrain {

/// The whole command line: `gridtrain [-i DECK] [--section.key=value ...]`, `--help`,
/// `--version`, `prepare text ...`. Initializes and finalizes MPI. Returns the exit code:
/// 0 on success, kExitError after a reported error; a fault on one rank aborts the job.
int cli_main(int argc, char** argv);

}  // namespace gridtrain
