#!/usr/bin/env bash
# Debian packages some tests use: PostgreSQL (shared tuning study), Chromium (reports
# render in a real browser), Prometheus (scrapes perfkit's live metrics) and docker.io
# (dockerd, which the docker launch-mode tests start by hand). Installs them
# when missing and apt-get is usable (root); otherwise the tests that need them skip with a message saying so.
set -uo pipefail
need=()
[ -x /usr/lib/postgresql/*/bin/initdb ] 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)  # the live-metrics test scrapes perfkit with it
command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || need+=(docker.io)  # docker launch mode runs against a real engine
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: installing ${need[*]}" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}") >/tmp/perfkit-apt.log 2>&1 \
      || echo "system-deps: could not install ${need[*]} (see /tmp/perfkit-apt.log); tests needing them will skip" >&2
  else
    echo "system-deps: ${need[*]} missing and apt-get unavailable; tests needing them will skip" >&2
  fi
fi
exit 0
