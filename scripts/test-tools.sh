#!/usr/bin/env bash
# Provisions the test tools this project did not write, as CI does, so that
# `cargo test --workspace` runs every test instead of skipping some:
#   - Garage 2.5.0, the S3 server the remote tests push to (cargo install into
#     ~/.cargo/bin; a cold build takes long on 2 cores, so it builds less optimised);
#   - the official MCP Python SDK (pip), the client that drives `turnback mcp`;
#   - tmux and GNU time (apt-get, when this user may run it): the terminal `turnback ui`
#     is driven in, and the peak-memory measure of the bounded-memory tests.
# Node.js (the opencode plugin) and npm (the real agents) come with the machine: this
# script says when they are missing. Each install is tried three times (registries blip).
# Exit status: 0 when every tool is there afterwards, 1 naming what is not.
set -uo pipefail
export PATH="$HOME/.cargo/bin:$PATH"
tmp="${TMPDIR:-/tmp}"
retry() { for _ in 1 2 3; do "$@" && return 0; sleep 5; done; return 1; }
missing=()

garage_install() {
  command -v garage >/dev/null && return 0
  CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_TARGET_DIR="$tmp/garage-build" \
    cargo install garage --version 2.5.0 --locked >"$tmp/garage-install.log" 2>&1
}
mcp_install() {
  python3 -c 'import mcp.client.stdio' 2>/dev/null && return 0
  python3 -m pip install --quiet 'mcp==2.3.0'
}
apt_install() {
  command -v tmux >/dev/null && [ -x /usr/bin/time ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  { $sudo apt-get update -qq && $sudo apt-get install -y -qq tmux time; } >/dev/null
}

# Garage builds in the background while the quick ones install.
( retry garage_install || { tail -n 30 "$tmp/garage-install.log" >&2; exit 1; } ) &
garage_pid=$!
retry mcp_install || missing+=("the MCP Python SDK (python3 -m pip install mcp==2.3.0)")
retry apt_install || missing+=("tmux and GNU time (apt-get install tmux time)")
command -v node >/dev/null || missing+=("Node.js (https://nodejs.org; 20 or newer)")
command -v npm >/dev/null || missing+=("npm (comes with Node.js; installs the real agents)")
wait "$garage_pid" || missing+=("Garage (cargo install garage --version 2.5.0 --locked)")

if [ "${#missing[@]}" -gt 0 ]; then
  printf 'test-tools: missing %s\n' "${missing[@]}" >&2
  exit 1
fi
echo "test-tools: $(garage --version 2>/dev/null | head -n1), mcp, tmux, time, node $(node --version), npm $(npm --version): all here"
