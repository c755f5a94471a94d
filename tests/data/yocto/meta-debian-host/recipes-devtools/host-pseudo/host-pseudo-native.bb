SUMMARY = "Debian's pseudo (the host's) as virtual/fakeroot-native"
DESCRIPTION = "OE's pseudo-native is built from a git source that cannot be fetched offline; \
               this stages links to Debian's /usr/bin/pseudo and libpseudo.so where \
               bitbake.conf's FAKEROOTCMD and PSEUDO_LIBDIR look (PSEUDO_SYSROOT)."
LICENSE = "MIT"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/MIT;md5=0835ade698e0bcf8506ecda2f7b4f302"
PROVIDES = "virtual/fakeroot-native"
INHIBIT_DEFAULT_DEPS = "1"
inherit native
do_configure[noexec] = "1"
do_compile[noexec] = "1"
do_install() {
    install -d ${D}${bindir} ${D}${prefix}/lib/pseudo/lib ${D}${prefix}/lib/pseudo/lib64
    ln -s /usr/bin/pseudo ${D}${bindir}/pseudo
    ln -s /usr/lib/x86_64-linux-gnu/pseudo/libpseudo.so ${D}${prefix}/lib/pseudo/lib/libpseudo.so
    ln -s /usr/lib/x86_64-linux-gnu/pseudo/libpseudo.so ${D}${prefix}/lib/pseudo/lib64/libpseudo.so
}
