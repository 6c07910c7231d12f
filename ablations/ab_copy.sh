#!/bin/bash
# ablations/ab/NAME/kernels: a copy of kernels/ with the kernels/ part of
# ablations/patches/NAME.patch (or of the file PATH/NAME.patch given) applied, for an A/B with
# compare_kernels.py:
#
#   bash ablations/ab_copy.sh NAME
#   python3 ablations/compare_kernels.py kernels:FIELDS ablations/ab/NAME/kernels:FIELDS
#
# ablations/ab/ is git-ignored: name it in the device call's carry (["ablations/ab"]).
set -euo pipefail
arg=${1:?usage: ab_copy.sh NAME (a patch in ablations/patches/) or PATH/NAME.patch}
root=$(cd "$(dirname "$0")/.." && pwd)
name=$(basename "$arg" .patch)
if [[ $arg == *.patch ]]; then patch=$(realpath "$arg"); else patch=$root/ablations/patches/$name.patch; fi
[ -f "$patch" ] || { echo "no such patch: $patch" >&2; exit 2; }
copy=ablations/ab/$name
cd "$root"
rm -rf "$copy" && mkdir -p "$copy"
cp -r kernels "$copy/kernels" && rm -rf "$copy/kernels/__pycache__"
git apply --directory="$copy" --include="$copy/kernels/*" "$patch"
if diff -rq kernels "$copy/kernels" > /dev/null; then
  echo "$name.patch changed nothing under kernels/" >&2
  exit 1
fi
echo "$copy/kernels"
