#!/usr/bin/env bash
# yocto-check-layer (OE-core's Yocto Project Compatible checks) on an emitted meta-q25, with a
# Yocto snapshot of ../shared/yocto (MACHINE qemuarm64, nodistro, offline). It parses the
# world several times and compares task signatures with and without the layer: minutes, so it
# is in the campaign tier (tests/packer/test_check_layer.py).
#
#   q25deploy build --target qemu --layer-maintainer 'Name <name@example.org>' --out q25-build/qemu
#   tools/check_layer.sh q25-build/qemu/meta-q25 [SERIES [xilinx]]   # as a non-root user
#
# SERIES: scarthgap (default), langdale, whinlatter or wrynose; "xilinx" (langdale, scarthgap: the
# snapshots with meta-xilinx): with meta-arm, meta-arm-toolchain
# and meta-xilinx-core as dependencies (kv260, zcu104). Q25_YOCTO_SNAPSHOTS: the snapshot folder;
# Q25_CHECK_LAYER_WORKDIR: where to unpack and build (kept; default: a new temporary folder).
# Needs the Yocto host packages and an en_US.UTF-8 locale (.ci/run installs them). The exit
# status is yocto-check-layer's; its log is in the build folder (check-layer.log). Read it test
# by test: scarthgap's tool marks test_patches_upstream_status expectedFailure, so a layer with
# no malformed patch is an "unexpected success" there (tests/packer/test_check_layer.py).
set -euo pipefail
if [ $# -lt 1 ]; then sed -n '2,17p' "$0" >&2; exit 2; fi
if [ "$(id -u)" = 0 ]; then echo "check_layer.sh: BitBake refuses to run as root: run it as a normal user" >&2; exit 2; fi
layer=$(realpath "$1")
series=${2:-scarthgap}
deps=()
repo=$(cd "$(dirname "$0")/.." && pwd)
snapshot=${Q25_YOCTO_SNAPSHOTS:-$repo/../shared/yocto}/yocto-$series.tar.xz
[ -f "$snapshot" ] || { echo "check_layer.sh: no snapshot $snapshot (set Q25_YOCTO_SNAPSHOTS)" >&2; exit 2; }
[ -f "$layer/conf/layer.conf" ] || { echo "check_layer.sh: $layer is not a layer (no conf/layer.conf)" >&2; exit 2; }
work=${Q25_CHECK_LAYER_WORKDIR:-$(mktemp -d -t q25-check-layer-XXXXXX)}
tree=$work/$series
if [ ! -x "$tree/bitbake/bin/bitbake" ]; then
    mkdir -p "$tree"
    # --touch: some snapshots store mtime 0, which langdale's BitBake takes for deleted recipes (reparsing all on every run)
    tar --touch -xJf "$snapshot" -C "$tree"
fi
export LANG=en_US.UTF-8 LC_ALL=en_US.UTF-8
cd "$tree"
set +u  # oe-init-build-env reads unset variables
# shellcheck disable=SC1091
. openembedded-core/oe-init-build-env build-check-layer >/dev/null
set -u
if ! grep -q '^# q25deploy check_layer.sh' conf/local.conf; then
    cat >> conf/local.conf <<'EOF'
# q25deploy check_layer.sh
MACHINE = "qemuarm64"
DISTRO = "nodistro"
BB_NO_NETWORK = "1"
BB_NUMBER_THREADS = "2"
BB_NUMBER_PARSE_THREADS = "2"
EOF
fi
if [ "${3:-}" = xilinx ]; then
    # in BBLAYERS for every step (--additional-layers), their own dependencies found among --dependency
    deps=(--dependency "$tree/meta-arm/meta-arm" "$tree/meta-arm/meta-arm-toolchain" "$tree/meta-xilinx/meta-xilinx-core"
          --additional-layers "$tree/meta-xilinx/meta-xilinx-core")
fi
if [ "${3:-}" != xilinx ]; then
    # The tool's first run with the layer, `bitbake -p` (test_parse), writes BitBake's parse cache
    # without its task-signature part (SiggenRecipeInfo: kept only when the client asks for -S),
    # so its next one, `bitbake -S lockedsigs world` (test_signatures), parsed every recipe of
    # OE-core and the layer again: a second cold parse, 2-3 minutes on 2 cores. One parse with -S
    # and the layer added as the tool adds it (the same BBLAYERS, so the same configuration hash)
    # writes both parts first; the tool's runs with the layer load them. A recipe that fails to
    # parse is not cached, so the tool's own runs still meet every parse error.
    cp conf/bblayers.conf conf/bblayers.conf.q25-seed
    # bblayers.conf as it was, also when interrupted: the tool refuses a layer already in BBLAYERS
    trap 'mv -f conf/bblayers.conf.q25-seed conf/bblayers.conf' EXIT
    printf '\nBBLAYERS += "%s"\n' "$layer" >> conf/bblayers.conf  # as checklayer's add_layers writes it
    seeded=0
    bitbake -S none -p > check-layer-seed.log 2>&1 || seeded=$?
    mv conf/bblayers.conf.q25-seed conf/bblayers.conf
    trap - EXIT
    echo "check_layer.sh: parse cache with the layer written (bitbake -S none -p: exit $seeded, check-layer-seed.log)" >&2
fi
echo "check_layer.sh: yocto-check-layer $layer ($series${3:+, $3}, in $tree/build-check-layer)" >&2
# --no-auto: only the layer named (not layers found below it); --no-auto-dependency: not its
# dependencies as well (OE-core would be checked as a layer of its own)
yocto-check-layer --no-auto --no-auto-dependency --output-log check-layer.log "${deps[@]}" -- "$layer"
