# Start-up of the build scripts, sourced first: strict mode, the repository
# root as the working directory (in $root), the upstream-copy and
# version-stamp steps, and fail, which prefixes its message with the
# caller's $script_name.
set -euo pipefail
shopt -s inherit_errexit

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$(pwd)
# shellcheck source=hack/lib/upstream.sh
source hack/lib/upstream.sh
# shellcheck source=hack/lib/version.sh
source hack/lib/version.sh

fail() {
  echo "${script_name}: $*" >&2
  exit 1
}
