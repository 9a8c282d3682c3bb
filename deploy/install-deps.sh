#!/usr/bin/env bash
# Installs every build, test and run dependency of the project from Debian's
# packages (with --bench, also the benchmarks' peers). Idempotent: installs
# only what is missing. Run as root (or with sudo available) on Debian 12.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config clang llvm
  libclang-rt-14-dev   # libFuzzer and clang's sanitizer runtimes: only
                       # recommended by clang, and we install no recommends
  libevent-dev libwebsockets-dev libxml2-dev libhiredis-dev
  libcurl4-openssl-dev libcmocka-dev libssl-dev libsqlite3-dev
  libinih-dev libjansson-dev libzip-dev
  zlib1g-dev   # rssub, rsbridge, rsdoc: gzipped documents (sitemap.xml.gz)
  libjwt-dev   # rshub: signed, expiring read tokens (JWT)
  redis-server curl
  iproute2 util-linux   # the tests: ss -K (chaos), unshare (test_multinode)
  python3 python3-defusedxml python3-dateutil python3-requests python3-websockets
  python3-jwt python3-cryptography   # test_hub_private.sh signs JWTs
  python3-distutils   # resync, the interop tests' reference tools, imports it
  systemd   # systemd-analyze: test_package.sh verifies the packaged units
  dpkg-dev file lintian   # deploy/package.sh: CPack's DEB generator
                          # (dpkg-shlibdeps), tests/integration/test_package.sh
  prometheus   # promtool, for tests/integration/test_monitoring.sh
  chromium chromium-driver   # tests/integration/test_ui.sh: the dashboards
                             # in headless Chromium (WebDriver)
  openssl nginx-light   # test_sub_credentials.sh: a private CA, TLS in front of rshub
  faketime   # test_hub_clock.sh: a hub node whose clock is 30 days ahead
)

# --bench: also what the benchmarks compare against (nginx with nchan; nginx
# itself is in the list above).
if [ "${1:-}" = "--bench" ]; then
  PKGS+=(libnginx-mod-nchan)
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
    || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
