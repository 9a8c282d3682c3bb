# Warning flags are probed, so an older or other compiler still builds.
include(CheckCCompilerFlag)
set(RS_WARN_FLAGS)
foreach(flag -Wall -Wextra -Wshadow -Wformat=2 -Wstrict-prototypes
             -Wmissing-prototypes -Wold-style-definition -Wvla
             -Wpointer-arith -Wcast-qual -Wwrite-strings -Wundef
             -Wimplicit-fallthrough -Wnull-dereference)
  string(MAKE_C_IDENTIFIER "RS_HAS${flag}" var)
  check_c_compiler_flag(${flag} ${var})
  if(${var})
    list(APPEND RS_WARN_FLAGS ${flag})
  endif()
endforeach()
if(RS_WERROR)
  list(APPEND RS_WARN_FLAGS -Werror)
endif()
add_compile_options(${RS_WARN_FLAGS})

if(RS_SANITIZE)
  set(san -fsanitize=address,undefined -fno-sanitize-recover=undefined
          -fno-omit-frame-pointer)
  add_compile_options(${san})
  add_link_options(${san})
endif()
# The modules that run threads (rssub's dump: writers, opener, remover;
# the parser they share) are also tested under ThreadSanitizer: a data
# race ASan cannot see (tests/run.sh).
if(RS_TSAN)
  if(RS_SANITIZE)
    message(FATAL_ERROR "RS_TSAN and RS_SANITIZE exclude each other")
  endif()
  set(tsan -fsanitize=thread -fno-omit-frame-pointer)
  add_compile_options(${tsan})
  add_link_options(${tsan})
endif()
