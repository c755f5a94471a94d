# nooelint: oelint.var.mandatoryvar.HOMEPAGE,oelint.var.suggestedvar.BUGTRACKER,oelint.var.suggestedvar.CVE_PRODUCT,oelint.var.suggestedvar.AUTHOR - q25deploy has no public homepage, bug tracker or CVE product; the layer README says where this recipe comes from; no AUTHOR (oelint-adv suggests it for langdale, OE-core later dropped it): the README names the maintainer
SUMMARY = "Qwen2.5 tokenizer runtime (q25tok) for Q25TOKRT images"
DESCRIPTION = "C11 library and command that read a Q25TOKRT tokenizer image and \
               encode text to Qwen2.5 token ids exactly as llama.cpp does, and decode ids to text."
SECTION = "libs"
LICENSE = "MIT"
LIC_FILES_CHKSUM = "file://LICENSE;md5=16bf34aabb236f8298923c56357fdb93"

SRC_URI = "file://LICENSE;subdir=q25tok \
           file://Makefile;subdir=q25tok \
           file://cli_compare.c;subdir=q25tok \
           file://cli_create.c;subdir=q25tok \
           file://cli_dequant.c;subdir=q25tok \
           file://cli_generate.c;subdir=q25tok \
           file://cli_probe.c;subdir=q25tok \
           file://cli_load.c;subdir=q25tok \
           file://cli_open.c;subdir=q25tok \
           file://cli_open.h;subdir=q25tok \
           file://cli_ota.c;subdir=q25tok \
           file://cli_receive.c;subdir=q25tok \
           file://cli_weights.c;subdir=q25tok \
           file://cli_weights.h;subdir=q25tok \
           file://model_forward.c;subdir=q25tok \
           file://ota.h;subdir=q25tok \
           file://ota_fs.c;subdir=q25tok \
           file://ota_json.c;subdir=q25tok \
           file://ota_plan.c;subdir=q25tok \
           file://ota_smoke.c;subdir=q25tok \
           file://ota_stage.c;subdir=q25tok \
           file://ota_steps.c;subdir=q25tok \
           file://crc_table.inc;subdir=q25tok \
           file://q25tok.h;subdir=q25tok \
           file://q25tok_bpe.c;subdir=q25tok \
           file://q25tok_cli.c;subdir=q25tok \
           file://q25tok_compare.c;subdir=q25tok \
           file://q25tok_decode.c;subdir=q25tok \
           file://q25tok_dequant.c;subdir=q25tok \
           file://q25tok_encode.c;subdir=q25tok \
           file://q25tok_image.c;subdir=q25tok \
           file://q25tok_internal.h;subdir=q25tok \
           file://q25tok_region.c;subdir=q25tok \
           file://q25tok_mmio.c;subdir=q25tok \
           file://q25tok_params.c;subdir=q25tok \
           file://q25tok_qrow.c;subdir=q25tok \
           file://q25tok_rowdot.c;subdir=q25tok \
           file://q25tok_sha256.c;subdir=q25tok \
           file://q25tok_tensor.c;subdir=q25tok \
          "

# styhead and later unpack into UNPACKDIR (and refuse S = WORKDIR); scarthgap has no
# UNPACKDIR and unpacks into WORKDIR. Setting UNPACKDIR here, even weakly, would override
# bitbake.conf's own weak default on styhead and later. The sources go to a subdirectory
# (subdir= above), which do_unpack empties first: with S = WORKDIR, do_package hardlinks the
# sources into the -src package's tree and a rebuild after any change aborts in pseudo ("path
# mismatch", found by BitBake on scarthgap; docs/contributing.md).
S = "${@d.getVar('UNPACKDIR') or d.getVar('WORKDIR')}/q25tok"

# q25tok_dequant.c (ggml dequantization, bit-exact with gguf-py) is compiled by the Makefile
# with -fno-fast-math -ffp-contract=off after CFLAGS: a fused multiply-add would round once
# where numpy rounds twice, and the A53 has FMA. model_forward.c (q25tok generate) and
# q25tok_rowdot.c and q25tok_qrow.c (its row dot products) likewise.
# Do not add -ffast-math to this recipe's CFLAGS.
# The Makefile links q25tok with -lm -pthread itself, after LDFLAGS (the forward pass's
# worker threads), so this recipe's LDFLAGS need not name them.

# WARNFLAGS without the Makefile's -Werror: a new compiler's new warning must not break an
# image build (q25deploy's own host builds and tests keep -Werror)
EXTRA_OEMAKE = "'CC=${CC}' 'AR=${AR}' 'CFLAGS=${CFLAGS}' 'LDFLAGS=${LDFLAGS}' 'WARNFLAGS=-Wall -Wextra' \
                'prefix=${prefix}' 'bindir=${bindir}' 'libdir=${libdir}' 'includedir=${includedir}' \
               "

do_compile() {
    oe_runmake all
}

do_install() {
    oe_runmake install 'DESTDIR=${D}'
}

# q25tok goes to ${PN}, q25tok.h to ${PN}-dev and libq25tok.a to ${PN}-staticdev (the defaults)

BBCLASSEXTEND = "native nativesdk"
