# q25deploy tests: the target's toolchain class on OE-core with toolchain classes (whinlatter
# and later; PREFERRED_TOOLCHAIN_TARGET in tests/yocto_toolchain.py's tcmode): gcc's tool
# names (OE-core's own class), Debian's cross gcc staged by meta-arm's external-arm-toolchain
# recipe as the cross compiler and its libraries
inherit toolchain/gcc

PREFERRED_PROVIDER_virtual/${MLPREFIX}cross-cc = "external-arm-toolchain"
PREFERRED_PROVIDER_virtual/${MLPREFIX}cross-c++ = "external-arm-toolchain"
PREFERRED_PROVIDER_virtual/${MLPREFIX}compilerlibs = "external-arm-toolchain"
