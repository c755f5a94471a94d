# nooelint: oelint.var.suggestedvar.BUGTRACKER - q25deploy has no public bug tracker; the layer README says where this recipe comes from
SUMMARY = "q25deploy: Qwen2.5 tokenizer runtime and model assets"
DESCRIPTION = "Pulls the q25tok tokenizer runtime and the model assets (tokenizer image, \
               tensor partitions, memory map) of the q25deploy build this layer came from."
SECTION = "base"
LICENSE = "MIT"

# the model assets are one board's memory plan
PACKAGE_ARCH = "${MACHINE_ARCH}"

inherit packagegroup

RDEPENDS:${PN} = "q25-model-assets \
                  q25-regions \
                  q25-tokenizer-runtime \
                 "
