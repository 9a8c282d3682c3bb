# Finds every dependency with pkg-config. A missing one stops the configure
# with the Debian package that provides it (deploy/install-deps.sh installs
# them all).
find_package(PkgConfig)
if(NOT PKG_CONFIG_FOUND)
  message(FATAL_ERROR "pkg-config not found: apt-get install pkg-config "
                      "(or run deploy/install-deps.sh)")
endif()
find_package(Threads REQUIRED)

# rs_dep(NAME pkg-config-module debian-package): imported target rs_dep::NAME
function(rs_dep name module debpkg)
  pkg_check_modules(RSDEP_${name} QUIET IMPORTED_TARGET GLOBAL ${module})
  if(NOT RSDEP_${name}_FOUND)
    message(FATAL_ERROR "${module} not found: apt-get install ${debpkg} "
                        "(or run deploy/install-deps.sh)")
  endif()
  add_library(rs_dep::${name} ALIAS PkgConfig::RSDEP_${name})
endfunction()

rs_dep(xml2       libxml-2.0       libxml2-dev)
rs_dep(curl       libcurl          libcurl4-openssl-dev)
rs_dep(crypto     libcrypto        libssl-dev)
rs_dep(ssl        libssl           libssl-dev)
rs_dep(event      libevent         libevent-dev)
rs_dep(event_pthreads libevent_pthreads libevent-dev)
rs_dep(lws        libwebsockets    libwebsockets-dev)
rs_dep(hiredis    hiredis          libhiredis-dev)
rs_dep(sqlite     sqlite3          libsqlite3-dev)
rs_dep(inih       inih             libinih-dev)
rs_dep(jansson    jansson          libjansson-dev)
rs_dep(zip        libzip           libzip-dev)
rs_dep(zlib       zlib             zlib1g-dev)
# rshub's signed read tokens (JWT): Debian's libjwt, not our own JOSE code
rs_dep(jwt        libjwt           libjwt-dev)
if(RS_TESTS)
  rs_dep(cmocka   cmocka           libcmocka-dev)
endif()
