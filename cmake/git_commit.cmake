# Writes OUT (a header defining GRIDTRAIN_GIT_COMMIT) with the commit of the source tree SRC,
# `git describe --always --dirty`, or "unknown" outside a git checkout. Run at every build, it
# rewrites OUT only when the commit changed, so that only what includes it is compiled again.
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR commit STREQUAL "")
  set(commit "unknown")
endif()
set(text "#pragma once\n#define GRIDTRAIN_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
