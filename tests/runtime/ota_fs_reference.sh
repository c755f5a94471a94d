#!/bin/sh
# q25-ota.sh's file-system functions as they were before q25tok ota replaced it (commit 758645f):
# the reference test_ota_fs.py compares ota_fs.c's messages with, under BusyBox sh.
#   sh ota_fs_reference.sh FUNCTION ARG...   (put reads standard input)
set -u
umask 022  # what it creates is the same whatever the engine's umask (the release's modes: set_modes)
LC_ALL=C; export LC_ALL  # the name checks' [A-Za-z0-9] ranges are ASCII only in the C locale
exec 3>&2
die() { echo "q25-ota: $*" >&2; exit 1; }
say() { echo "q25-ota: $*" >&3; }
no_link() {  # PATH...: refuse a symlink (one this script did not create)
    for q_p; do [ -L "$q_p" ] && die "$q_p is a symlink: refusing to follow it"; done; return 0
}
no_fifo() {  # PATH...: what exists there is a regular file (a FIFO or device would block a read)
    for q_p; do { [ ! -e "$q_p" ] || [ -f "$q_p" ]; } || die "$q_p is not a regular file: refusing to read it"; done
    return 0
}
no_link_in() {  # DIR REL: no part of REL under DIR is a symlink
    q_r=$2
    while :; do no_link "$1/$q_r"; case "$q_r" in */*) q_r=${q_r%/*} ;; *) return 0 ;; esac; done
}
{ ME=$(id -u) && case "$ME" in ''|*[!0-9]*) false ;; esac; } || die "cannot tell which user runs this script (id -u)"
if [ "$ME" = 0 ]; then WHO=root; OWN=root:root; else WHO="uid $ME"; OWN="$ME:$(id -g)"; fi

ls_meta() {  # PATH -> "MODE LINKS UID" of PATH itself (a link is not followed); nothing when absent
    # shellcheck disable=SC2012  # BusyBox find has no -printf; awk reads ls's fixed first fields, never the name
    ls -lnd -- "$1" 2>/dev/null | awk 'NR == 1 { print substr($1, 1, 10), $2, $3 }'
}

own_above() {  # TREE DIR: DIR, above TREE, is root's (or ours) and no one else may write it
    q_m=$(ls_meta "$2"); [ -n "$q_m" ] || return 0  # not there yet: mkdir -p makes it ours
    q_mode=${q_m%% *}; q_uid=${q_m##* }
    case "$q_mode" in [dl]*) ;; *) die "$2, above $1, is not a directory" ;; esac
    case "$q_uid:$q_mode" in
        0:l*|"$ME":l*) return 0 ;;  # where it leads is checked as resolved (own_ancestors)
        0:d????-??-?|"$ME":d????-??-?|0:d????????[tT]) return 0 ;;
    esac
    die "$2, above $1, is owned by uid $q_uid (mode $q_mode): whoever owns or can write a directory above the tree root installs into can swap that tree: make it $WHO's alone (chown $OWN $2 && chmod go-w $2) or choose a directory below $WHO's own ones"
}

own_ancestors() {  # TREE: every directory above TREE as named, and as resolved (cd -P), is root's
    q_a=$1; q_deep=''
    while :; do
        case "$q_a" in */*) q_a=${q_a%/*}; q_a=${q_a:-/} ;; *) break ;; esac
        own_above "$1" "$q_a"
        [ -z "$q_deep" ] && [ -d "$q_a" ] && q_deep=$q_a
        [ "$q_a" = / ] && break
    done
    q_a=$(cd -P -- "${q_deep:-.}" && pwd -P) || die "cannot resolve the directories above $1"
    while :; do
        own_above "$1" "$q_a"
        [ "$q_a" = / ] && return 0
        q_a=${q_a%/*}; q_a=${q_a:-/}
    done
}

own_tree() {  # TREE KIND(install|payload): TREE, everything in it and above it is ours alone
    own_ancestors "$1"
    no_link "$1"; [ -e "$1" ] || return 0
    [ -d "$1" ] || die "$1 is not a directory"
    q_bad=$(find "$1" \( ! -user "$ME" -o ! -type l \( -perm -020 -o -perm -002 \) \) -print) ||
        die "cannot check who owns what is in $1"
    [ -n "$q_bad" ] || return 0
    q_p=$(printf '%s\n' "$q_bad" | head -n 1); q_m=$(ls_meta "$q_p")
    q_mode=${q_m%% *}; q_uid=${q_m##* }
    if [ "$q_uid" != "$ME" ]; then q_what="is owned by uid ${q_uid:-?} (mode ${q_mode:-?}), not by $WHO who runs this"
    else q_what="can be written by others than $WHO (mode $q_mode)"; fi
    q_fix="chown -R $OWN $1 && chmod -R go-w $1"
    if [ "$2" = payload ]; then
        die "$q_p $q_what: root installs only a payload no one else can change: let the update engine write it, or $q_fix"
    fi
    [ "$q_uid" = "$ME" ] || q_fix="this install dir is another user's (a deploy --become none install?): use a separate install dir for OTA; if no one else ever wrote there: $q_fix"
    die "$q_p $q_what: root installs only into a tree that is its own alone (one owner per tree): $q_fix"
}

own_record() {  # FILE: one of root's own records (state, rollback data, release.json), read as
    # trusted only when it is a regular file of ours with one name that no one else may write
    no_link "$1"; no_fifo "$1"; [ -e "$1" ] || return 0
    q_m=$(ls_meta "$1")
    case "$q_m" in -????-??-?" 1 $ME") return 0 ;; esac
    q_n=${q_m#* }
    die "$1 is not a record q25-ota wrote (mode ${q_m%% *}, ${q_n%% *} name(s), uid ${q_m##* }): root trusts as its own only a regular file it alone owns and can write, with no other name (no hard link); remove it if it is not q25-ota's"
}

own_file() {  # FILE MODE(-rw-r--r--|-rwxr-xr-x): a release file as q25-ota installs it, ours, that
    # mode, other names allowed (a kept release shares its files): taken as it is, never chmodded
    no_link "$1"
    q_m=$(ls_meta "$1")
    case "$q_m" in "$2 "*" $ME") return 0 ;; esac
    die "$1 is not a release file as q25-ota installs it ($2, $WHO's; it is ${q_m:-missing}): root changes no mode of a file it did not place (it may have another name): install a full release"
}

put() {  # FILE: standard input into FILE (never through a link, never onto a directory)
    no_link "$1"; [ -d "$1" ] && die "$1 is a directory"
    q_tmp=$(mktemp "$1.XXXXXX") || die "cannot create a temporary beside $1"
    # synced before the rename (no empty file) and after it (the engine reports success next:
    # a power cut after that must find the file; found by the emulated board's write log)
    { cat > "$q_tmp" && chmod 0644 "$q_tmp" && sync && mv -f "$q_tmp" "$1" && sync; } || { rm -f "$q_tmp"; die "cannot write $1"; }
}

place() {  # SRC DST: a hard link when on one filesystem and SRC has no other name, else a copy;
    # never onto an existing name (what root places it may chmod: set_modes)
    no_link "$1"; [ -f "$1" ] || die "$1: not a regular file"
    if [ -e "$2" ] || [ -L "$2" ]; then die "$2 exists already: refusing to write onto it"; fi
    q_n=$(ls_meta "$1"); q_n=${q_n#* }; q_n=${q_n%% *}
    if [ "$q_n" = 1 ] && ln "$1" "$2" 2>/dev/null; then return 0; fi
    cp "$1" "$2" || die "cannot copy $1"
}
"$@"
