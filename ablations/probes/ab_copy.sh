#!/bin/bash
# Question: what does a kept patch cost? Its patched copy for compare_kernels (D23, D38)
# ablations/ab/NAME/kernels: a copy of kernels/ with the kernels/ part of
# ablations/patches/NAME.patch (or of the file PATH/NAME.patch given) applied, for an A/B with
# compare_kernels.py:
#
#   bash ablations/probes/ab_copy.sh NAME
#   python3 ablations/probes/compare_kernels.py kernels:FIELDS ablations/ab/NAME/kernels:FIELDS
#
# Several patches are applied in the order given, each on top of the ones before (a patch
# written against another patch's tree), into ablations/ab/NAME1+NAME2/kernels.
# ablations/ab/ is git-ignored: name it in the device call's carry (["ablations/ab"]).
if [ "${1:-}" = --help ]; then sed -n '2,/^set /s/^# \{0,1\}//p' "$0"; exit 0; fi
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: ab_copy.sh NAME... (patches in ablations/patches/) or PATH/NAME.patch..." >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
patches=() names=()
for arg in "$@"; do
  name=$(basename "$arg" .patch)
  if [[ $arg == *.patch ]]; then patch=$(realpath "$arg"); else patch=$root/ablations/patches/$name.patch; fi
  [ -f "$patch" ] || { echo "no such patch: $patch" >&2; exit 2; }
  patches+=("$patch") names+=("$name")
done
copy=ablations/ab/$(IFS=+; echo "${names[*]}")
cd "$root"
rm -rf "$copy" && mkdir -p "$copy"
cp -r kernels "$copy/kernels" && find "$copy/kernels" -name __pycache__ -prune -exec rm -rf {} +
before=$(mktemp -d) && trap 'rm -rf "$before"' EXIT
for i in "${!patches[@]}"; do
  rm -rf "$before/kernels" && cp -r "$copy/kernels" "$before/"
  git apply --directory="$copy" --include="$copy/kernels/*" "${patches[$i]}"
  if diff -rq "$before/kernels" "$copy/kernels" > /dev/null; then
    echo "${names[$i]}.patch changed nothing under kernels/" >&2
    exit 1
  fi
done
echo "$copy/kernels"
