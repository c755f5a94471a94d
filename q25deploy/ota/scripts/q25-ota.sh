#!/bin/sh
# q25-ota: the Mender update module and SWUpdate script of q25deploy releases. A dispatcher of
# the engines' states onto `q25tok ota STEP` (the image's q25tok: stage, verify, switch, load,
# smoke test, roll back; docs/ota.md), which runs every step as root, checked and tested in C.
#
#   Mender update module (/usr/share/mender/modules/v3/q25-release):  q25-ota STATE FILE-TREE
#   SWUpdate shellscript (before and after its files handler):        q25-ota preinst|postinst
#   by hand:                                                          q25-ota install|smoke|rollback DIR
#
# Q25_ROOT prefixes every board path (tests, chroots), like deploy's --remote-root. The q25tok it
# runs is the plan's (Mender) or the one package set (SWUpdate, before its payload exists): a
# plain path named q25tok outside the install dir, a regular file owned by the user running
# this (the package manager's), never a link; `q25tok ota` checks the rest.
set -u
ROOT="${Q25_ROOT:-}"
Q25_SWU_DIR=''  # set by `q25deploy package --format swupdate` (where the files handler writes)
Q25_SWU_TOK=''  # set by `q25deploy package --format swupdate` (the board's q25tok)

die() { echo "q25-ota: $*" >&2; exit 1; }

q25tok_at() {  # PATH INSTALL-DIR -> the q25tok to run, under Q25_ROOT
    case "$1" in /*/q25tok|/q25tok) ;; *) die "bad q25tok path '$1' in the plan" ;; esac
    case "$1" in *[!A-Za-z0-9/._+-]*|*/../*|*/./*|*//*) die "bad q25tok path '$1' in the plan" ;; esac
    case "$1/" in "$2"/*) die "the plan's q25tok $1 is inside the install dir" ;; esac
    { [ ! -L "$ROOT$1" ] && [ -f "$ROOT$1" ] && [ -x "$ROOT$1" ]; } ||
        die "no q25tok at $ROOT$1 (the image's q25-tokenizer-runtime package installs it): root runs no other"
    [ -O "$ROOT$1" ] || die "$ROOT$1 is not owned by the user running q25-ota: refusing to run it"
    echo "$ROOT$1"
}

plan_q25tok() {  # DIR -> the plan's q25tok
    { [ ! -L "$1" ] && [ ! -L "$1/q25-plan" ] && [ -f "$1/q25-plan" ]; } || die "$1/q25-plan: no plan in the payload"
    q_tok=$(sed -n 's/^q25tok //p' "$1/q25-plan" | head -n 1)
    q25tok_at "$q_tok" "$(sed -n 's/^install //p' "$1/q25-plan" | head -n 1)"
}

step() {  # STEP DIR [--stdout]: q25tok ota STEP with the plan's q25tok
    q_run=$(plan_q25tok "$2") || exit 1
    exec "$q_run" ota "$1" --root "$ROOT" ${3:+"$3"} "$2"
}

swu() {  # STEP: SWUpdate's drop directory, with the q25tok package set
    { [ -n "$Q25_SWU_DIR" ] && [ -n "$Q25_SWU_TOK" ]; } || die "no payload directory set for SWUpdate"
    q_run=$(q25tok_at "$Q25_SWU_TOK" "${Q25_SWU_DIR%/*}") || exit 1
    exec "$q_run" ota "$1" --root "$ROOT" --stdout "$ROOT$Q25_SWU_DIR"
}

case "${1:-}" in
    SupportsRollback) echo Yes ;;
    NeedsArtifactReboot) echo No ;;
    ProvidePayloadFileSizes) echo No ;;
    ArtifactInstall) step install "$2/files" ;;
    ArtifactCommit) step smoke "$2/files" ;;
    ArtifactRollback) step rollback "$2/files" ;;
    Cleanup) if [ -f "$2/files/q25-plan" ]; then step cleanup "$2/files"; fi ;;
    preinst) swu prepare ;;  # before the files handler writes: a fresh drop directory
    postinst) swu postinst ;;  # install and smoke test, rolled back when either fails
    install|smoke|rollback) step "$1" "$2" ;;
    *) ;;  # other states and future queries: nothing to do (update module protocol)
esac
