#!/usr/bin/env bash
# Builds the Debian packages of rspush from this checkout and prints the
# path of each, one a line:
#   rspush-hub (rshub, rspub), rspush-subscriber (rssub), rspush-source
#   (rssource), rspush-bridge (rsbridge), rspush-tools (rsdoc).
# A Release build with Debian's build flags (dpkg-buildflags: hardening,
# fortify) in its own build tree, then CPack's DEB generator
# (cmake/RsPackage.cmake); dependencies come from dpkg-shlibdeps.
#
#   deploy/package.sh            build, print the .deb paths
#   deploy/package.sh --lintian  also run lintian on them (fails on an error
#                                or a warning)
#
# Environment:
#   RS_PKG_BUILD_DIR  the build tree (default ./build-package); a second run
#                     rebuilds only what changed
#   RS_JOBS           parallel compile jobs (default: the number of cores)
# Needs dpkg-dev and file (deploy/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
lint=0
for arg in "$@"; do
    case $arg in
        --lintian) lint=1 ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        *) echo "package: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
done
for tool in dpkg-buildflags dpkg-shlibdeps file; do
    command -v "$tool" >/dev/null || {
        echo "package: $tool not found: run deploy/install-deps.sh" >&2
        exit 1
    }
done

build=${RS_PKG_BUILD_DIR:-$root/build-package}
jobs=${RS_JOBS:-$(nproc 2>/dev/null || echo 2)}

# Debian's flags, as debhelper would pass them, with every hardening
# feature (bindnow too: the daemons load no plugins lazily). CMake reads
# CFLAGS and LDFLAGS from the environment only when it first configures a
# tree, and never CPPFLAGS (-D_FORTIFY_SOURCE): so they are given
# explicitly.
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
cflags="$(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CFLAGS)"
ldflags=$(dpkg-buildflags --get LDFLAGS)
# The Release build type adds -O3 -DNDEBUG after these flags; -O2 of
# Debian's CFLAGS is thereby overridden, as in our other Release builds.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX=/usr -DRS_PACKAGE=ON -DRS_TESTS=OFF -DRS_BENCH=OFF \
      -DCMAKE_C_FLAGS="$cflags" -DCMAKE_EXE_LINKER_FLAGS="$ldflags" >/dev/null
cmake --build "$build" -j "$jobs" >/dev/null

# cpack prints its own progress on stdout; only the package paths go there.
rm -rf "$build/packages"
(cd "$build" && cpack -G DEB >&2)
mapfile -t debs < <(find "$build/packages" -maxdepth 1 -name '*.deb' | LC_ALL=C sort)
[ "${#debs[@]}" -eq 5 ] || {
    echo "package: want 5 packages, cpack made ${#debs[@]}" >&2
    exit 1
}
if [ "$lint" = 1 ]; then
    command -v lintian >/dev/null || {
        echo "package: lintian not found: run deploy/install-deps.sh" >&2
        exit 1
    }
    # No error and no warning; the tags of lower levels it shows are
    # listed, with why they stay, in docs/operations.md, "Packages".
    lintian --info --fail-on error,warning "${debs[@]}" >&2
fi
printf '%s\n' "${debs[@]}"
