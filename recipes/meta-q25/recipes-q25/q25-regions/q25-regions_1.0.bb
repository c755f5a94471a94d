# nooelint: oelint.var.mandatoryvar.HOMEPAGE,oelint.var.suggestedvar.BUGTRACKER,oelint.var.suggestedvar.CVE_PRODUCT,oelint.var.bbclassextend,oelint.var.suggestedvar.AUTHOR - q25deploy has no public homepage, bug tracker or CVE product; a boot service of the target, nothing for native or the SDK; the layer README says where this recipe comes from; no AUTHOR (oelint-adv suggests it for langdale, OE-core later dropped it): the README names the maintainer
SUMMARY = "Load the q25deploy model partitions into reserved DDR at boot"
DESCRIPTION = "Boot service (sysvinit script and systemd unit) that runs q25tok load on the \
               current release's region table early at boot, so the weights are resident in \
               the no-map reserved-memory regions before the application starts."
SECTION = "base"
LICENSE = "MIT"
LIC_FILES_CHKSUM = "file://LICENSE;md5=16bf34aabb236f8298923c56357fdb93"

SRC_URI = "file://LICENSE \
           file://q25-regions \
           file://q25-regions.service \
          "

# styhead and later unpack into UNPACKDIR (and refuse S = WORKDIR); scarthgap has no
# UNPACKDIR and unpacks into WORKDIR. Setting UNPACKDIR here, even weakly, would override
# bitbake.conf's default on styhead and later (see q25-tokenizer-runtime_1.0.bb)
S = "${@d.getVar('UNPACKDIR') or d.getVar('WORKDIR')}"

inherit allarch update-rc.d systemd

INITSCRIPT_NAME = "q25-regions"
INITSCRIPT_PARAMS = "start 20 S ."
SYSTEMD_SERVICE:${PN} = "q25-regions.service"

do_configure[noexec] = "1"
do_compile[noexec] = "1"

do_install() {
    install -d ${D}${sbindir} ${D}${sysconfdir}/init.d ${D}${systemd_system_unitdir}
    install -m 0755 ${S}/q25-regions ${D}${sbindir}/q25-regions
    install -m 0755 ${S}/q25-regions ${D}${sysconfdir}/init.d/q25-regions
    install -m 0644 ${S}/q25-regions.service ${D}${systemd_system_unitdir}/q25-regions.service
}

FILES:${PN} += "${systemd_system_unitdir}/q25-regions.service"

RDEPENDS:${PN} = "q25-tokenizer-runtime"
