# q25deploy tests: the names OE-core asks the cross toolchain by since styhead (toolchain
# classes, tests/yocto_toolchain.py); scarthgap's meta-arm-toolchain (the last with this
# recipe) provides only the ${TARGET_PREFIX} ones. Unused names on older series.
PROVIDES += "virtual/cross-cc virtual/cross-c++ virtual/cross-binutils virtual/compilerlibs"

# whinlatter and later unpack into UNPACKDIR, where S must be; OE-core's glibc-package.inc
# (which the recipe requires) stashes the locale list from WORKDIR/SUPPORTED. The same values
# as before on older series (no UNPACKDIR).
S = "${@d.getVar('UNPACKDIR') or d.getVar('WORKDIR') + '/' + d.getVar('BP')}"
do_install:append() {
    ${@'cp ' + d.getVar('UNPACKDIR') + '/SUPPORTED ' + d.getVar('WORKDIR') + '/SUPPORTED' if d.getVar('UNPACKDIR') else ''}
}
