#!/bin/sh
# q25-ota: installs a q25deploy release on the board from a Mender or SWUpdate payload, with
# the on-board layout of `q25deploy deploy` (POSIX sh; BusyBox sh, awk, sed, sha256sum).
#
#   Mender update module (/usr/share/mender/modules/v3/q25-release):  q25-ota STATE FILE-TREE
#   SWUpdate shellscript (before and after its files handler):        q25-ota preinst|postinst
#   by hand:                                                          q25-ota install|smoke DIR
#
# DIR holds the payload's flat files and the line-based plan `q25-plan` (values validated by
# q25deploy package). Under the install dir:
#   releases/<id>/  releases/.incoming-<id>/  current -> releases/<id>  .q25deploy-state.json
#   .q25-ota/       rollback data of the update in progress (old state, old current id)
#   .q25deploy-loaded  the boot and region table the reserved regions hold (as deploy writes it)
# A full release is refused before anything is staged when the running device tree does not
# reserve its regions (the plan's region lines; `unreserved allow`: a warning); after the switch,
# `q25tok load` copies its partitions into them, the smoke test reads them back (`q25tok verify`),
# and a rollback loads the previous release's again.
# Q25_ROOT prefixes every board path (tests, chroots), like deploy's --remote-root.
# One owner per tree (docs/security.md): root installs only into an install dir that is root's
# alone, every directory above it and everything in it, and from a payload directory no one else
# can write (own_tree, the first check of every step: refused with the fix, never repaired); it
# takes as its own record (state, rollback data, release.json) only a regular file of one name
# that it alone owns and can write, checked as the schema does (own_record, state_valid); and it
# chmods only files it placed itself (set_modes). So an install dir a `--become none` deploy
# user owns is refused, and no other user can race a check and the use that follows it.
# Everything under the install dir is input all the same, checked as if a deploy user had
# planted a symlink, a FIFO, a q25tok or a crafted `.q25-ota/*`, release.json or state file
# there: this script, run as root, executes no program from the install dir; the only q25tok it
# runs is the plan's, the image's packaged /usr/bin/q25tok, outside the install dir (load_plan)
# and owned by the user running the script (pick_q25tok). Every name it derives is checked as a
# plain name before it is used; a symlink it did not create is refused, never followed; a file
# it reads is first checked to be a regular file (a FIFO would block the read); its own files
# are written through a fresh temporary (mktemp: O_EXCL) renamed over the name; only 16-hex
# directories under releases/ are ever removed.
set -u
umask 022  # what it creates is the same whatever the engine's umask (the release's modes: set_modes)
LC_ALL=C; export LC_ALL  # the name checks' [A-Za-z0-9] ranges are ASCII only in the C locale
ROOT="${Q25_ROOT:-}"
Q25_SWU_DIR=''  # set by `q25deploy package --format swupdate` (where the files handler writes)

# Errors go to stderr. Progress goes to fd 3: stderr for Mender (which logs a module's stderr at
# level info and reads its stdout as answers to queries), stdout for SWUpdate (which logs a
# script's stdout as [TRACE], shown with -v, and every stderr line as [ERROR], even on success).
exec 3>&2
die() { echo "q25-ota: $*" >&2; exit 1; }
say() { echo "q25-ota: $*" >&3; }

# -- plain names -------------------------------------------------------------------------------
is_rid() {  # 16 lower-case hex digits (a release id)
    case "$1" in ????????????????) case "$1" in *[!0-9a-f]*) return 1 ;; esac; return 0 ;; esac; return 1
}
is_hex64() {
    case "$1" in *[!0-9a-f]*) return 1 ;; esac; [ ${#1} -eq 64 ]
}
is_hex16() {  # a 64-bit cell pair half: 16 lower-case hex digits
    case "$1" in *[!0-9a-f]*) return 1 ;; esac; [ ${#1} -eq 16 ]
}
is_node() {  # a device-tree node name: [A-Za-z0-9][A-Za-z0-9,._+@-]*, at most 127 characters
    case "$1" in [A-Za-z0-9]*) ;; *) return 1 ;; esac
    case "$1" in *[!A-Za-z0-9,._+@-]*) return 1 ;; esac; [ ${#1} -le 127 ]
}
is_name() {  # a plain file name: [A-Za-z0-9][A-Za-z0-9._+-]*, at most 128 characters
    case "$1" in [A-Za-z0-9]*) ;; *) return 1 ;; esac
    case "$1" in *[!A-Za-z0-9._+-]*) return 1 ;; esac; [ ${#1} -le 128 ]
}
is_region_node() {  # NODE BASE(16 hex): ours by name and place, q25-region<N>@<BASE, lower-case hex>
    # (q25deploy/board/plan.py's node names; q25tok load applies the same rule): another node of
    # the board's /reserved-memory (rproc@70000000, a PL DMA buffer) is never written
    case "$1" in q25-region[0-9]*@*) ;; *) return 1 ;; esac
    q_i=${1#q25-region}; q_i=${q_i%%@*}; q_a=${1#*@}; q_b=$(echo "$2" | sed 's/^0*//')
    is_digits "$q_i" && [ ${#q_i} -le 4 ] && case "$q_i" in 0?*) false ;; esac && [ "$q_a" = "${q_b:-0}" ]
}
is_rel() {  # a plain relative path: parts [A-Za-z0-9_][A-Za-z0-9._+-]* (never '', '.', '..', hidden)
    case "$1" in ''|/*|*/|*//*) return 1 ;; esac
    q_rest=$1
    while :; do
        q_part=${q_rest%%/*}
        case "$q_part" in [A-Za-z0-9_]*) ;; *) return 1 ;; esac
        case "$q_part" in *[!A-Za-z0-9._+-]*) return 1 ;; esac
        [ "$q_part" = "$q_rest" ] && return 0
        q_rest=${q_rest#*/}
    done
}
safe_rel() { is_rel "$1" || die "unsafe path '$1' in the plan"; }
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

# -- one owner per tree (docs/security.md) -----------------------------------------------------
# Root installs only into a tree of its own: the install dir, everything in it and every directory
# above it are owned by the user running this script (root) and writable by no one else; so is
# the payload directory it installs from. Above the tree a root-owned sticky directory (/tmp) is
# accepted: there only an entry's owner may rename or remove it, and the entry below is checked
# to be ours; a directory of another user's on the way is refused wherever it is (systemd-tmpfiles'
# "unsafe path transition": its owner can swap everything below it). Every step checks that
# before it reads or writes anything there, and refuses with one line that names the path, its
# owner and the fix: ownership is never repaired, a path never followed somewhere else. Once the
# tree is ours alone no one else can change what a check saw, which is what lets the rest of this
# script check a path and then use it. (ls -ln: every BusyBox has it; its stat and find -links
# are configurable out.)
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

# -- the plan ------------------------------------------------------------------------------------
plan_get() { sed -n "s/^$1 //p" "$PLAN" | head -n 1; }

load_plan() {  # DIR: every value checked before anything is derived from it
    DIR=$1
    PLAN="$DIR/q25-plan"
    no_link "$DIR" "$PLAN"
    own_tree "$DIR" payload  # what root installs from: no one else's to change
    [ -f "$PLAN" ] || die "$PLAN: no plan in the payload"
    [ "$(head -n 1 "$PLAN")" = "q25-ota-plan 1" ] || die "$PLAN: not a plan this script reads"
    MODE=$(plan_get mode); RELEASE=$(plan_get release); FPR=$(plan_get fingerprint)
    INSTALL=$(plan_get install); q25tok=$(plan_get q25tok); IMAGE=$(plan_get image)
    case "$MODE" in full|tokenizer) ;; *) die "bad mode '$MODE' in the plan" ;; esac
    case "$INSTALL" in /*) ;; *) die "bad install dir in the plan" ;; esac
    is_rid "$RELEASE" || die "bad release id in the plan"
    is_hex64 "$FPR" || die "bad vocabulary fingerprint in the plan"
    safe_rel "${INSTALL#/}"; safe_rel "$IMAGE"
    # q25tok: a plain absolute path outside the install dir (whose files anyone who can write
    # there controls), under Q25_ROOT; where it is not, the q25tok on PATH (see smoke)
    case "$q25tok" in /*) is_rel "${q25tok#/}" || die "bad q25tok path '$q25tok' in the plan" ;;
                      *) die "bad q25tok path '$q25tok' in the plan" ;; esac
    case "$q25tok/" in "$INSTALL"/*) die "the plan's q25tok $q25tok is inside the install dir" ;; esac
    # and it is a q25tok: a plain path to /bin/rm would still run `rm info IMAGE` as root
    case "$q25tok" in */q25tok) ;; *) die "the plan's q25tok $q25tok is not a file named q25tok" ;; esac
    Q25TOK=$ROOT$q25tok
    # the running device tree and physical memory (the board file's; defaults for older plans)
    DT=$(plan_get device_tree); MEM=$(plan_get memory); UNRESERVED=$(plan_get unreserved)
    DT=${DT:-/proc/device-tree}; MEM=${MEM:-/dev/mem}; UNRESERVED=${UNRESERVED:-refuse}
    for q_p in "$DT" "$MEM"; do
        case "$q_p" in /*) is_rel "${q_p#/}" || die "bad board path '$q_p' in the plan" ;; *) die "bad board path '$q_p' in the plan" ;; esac
        case "$q_p/" in "$INSTALL"/*) die "the plan's $q_p is inside the install dir" ;; esac
    done
    case "$UNRESERVED" in allow|refuse) ;; *) die "bad unreserved '$UNRESERVED' in the plan" ;; esac
    DT_LIVE=$ROOT$DT; MEM_LIVE=$ROOT$MEM
    BASE="$ROOT$INSTALL"
    OTA="$BASE/.q25-ota"
    STATE="$BASE/.q25deploy-state.json"
    LOADED="$BASE/.q25deploy-loaded"
    no_link "$BASE/releases" "$OTA" "$STATE" "$LOADED"
    own_tree "$BASE" install  # every step's first check: the tree is root's alone
    check_plan_lines
}

check_plan_lines() {  # file and smoke lines: exactly their fields, plain names, no release path twice
    grep '^file ' "$PLAN" | while read -r _ sha size name rel extra; do
        is_hex64 "$sha" && is_digits "$size" && [ -z "$extra" ] || die "bad file line for '$rel' in the plan"
        safe_rel "$rel"; [ "$rel" != release.json ] || die "release.json as a release file in the plan"
        is_name "$name" || die "unsafe payload name '$name' in the plan"
        [ "$name" != q25-plan ] && [ "$name" != release.json ] || die "payload name '$name' in a file line"
    done || exit 1
    [ -z "$(plan_rels | sort | uniq -d)" ] || die "the plan lists a release path twice"
    grep '^smoke ' "$PLAN" | while read -r _ name special ids extra; do
        is_name "$name" && [ -z "$extra" ] || die "bad smoke line '$name' in the plan"
        case "$special" in 0|1) ;; *) die "bad smoke line '$name' in the plan" ;; esac
        case "$ids" in *[!0-9,]*) die "bad smoke line '$name' in the plan" ;; esac
    done || exit 1
    grep '^region ' "$PLAN" | while read -r _ node base size extra; do
        is_node "$node" && is_hex16 "$base" && is_hex16 "$size" && [ -z "$extra" ] ||
            die "bad region line '$node' in the plan"
        is_region_node "$node" "$base" ||
            die "refusing region '$node' in the plan: not a q25deploy region (q25-region<N>@<its base>), not ours to write"
    done || exit 1
    [ "$MODE" = full ] || ! grep -q '^region ' "$PLAN" || die "region lines in a tokenizer-only plan"
    grep '^forward ' "$PLAN" | while read -r _ name extra; do  # full only, at most one
        is_name "$name" && [ -z "$extra" ] && [ "$name" != q25-plan ] && [ "$name" != release.json ] ||
            die "bad forward line '$name' in the plan"
    done || exit 1
    [ "$(grep -c '^forward ' "$PLAN")" -le 1 ] || die "more than one forward line in the plan"
    [ "$MODE" = full ] || ! grep -q '^forward ' "$PLAN" || die "a forward line in a tokenizer-only plan"
}

is_digits() { case "$1" in ''|*[!0-9]*) return 1 ;; esac; return 0; }
plan_rels() { grep '^file ' "$PLAN" | while read -r _ _ _ _ rel _; do echo "$rel"; done; }
payload() {  # NAME -> the path of a payload file (a regular file, not a link)
    no_link "$DIR/$1"; [ -f "$DIR/$1" ] || die "$DIR/$1: missing from the payload"; echo "$DIR/$1"
}

# -- reading our own JSON (always written with indent=2, sort_keys): checked, never trusted ------
release_files() {  # RELEASE.JSON -> "sha256 size path" lines, each checked (die on anything else)
    own_record "$1"
    awk '/^      "path": /{p=$2} /^      "sha256": /{s=$2} /^      "size": /{z=$2;
         gsub(/[",]/,"",p); gsub(/[",]/,"",s); gsub(/[",]/,"",z); print s, z, p}' "$1" |
    while read -r sha size rel extra; do
        { is_hex64 "$sha" && is_digits "$size" && is_rel "$rel" && [ -z "$extra" ] &&
            [ "$rel" != release.json ]; } || die "$1: bad file entry '$rel'"
        echo "$sha $size $rel"
    done
}

json_value() {  # FILE KEY -> the raw JSON value of a top-level key
    sed -n "s/^  \"$2\": \(.*\)$/\1/p" "$1" | sed 's/,$//' | head -n 1
}

json_checked() {  # FILE KEY KIND(hex64|name) NULL-OK(0|1) -> a JSON string of that kind (or null)
    q_v=$(json_value "$1" "$2")
    [ "$q_v" = null ] && [ "$4" = 1 ] && { echo null; return 0; }
    q_in=${q_v#\"}; q_in=${q_in%\"}
    { [ "\"$q_in\"" = "$q_v" ] && if [ "$3" = hex64 ]; then is_hex64 "$q_in"; else is_name "$q_in"; fi; } ||
        die "$1: bad $2"
    echo "$q_v"
}

state_valid() {  # FILE: a board state exactly as q25deploy writes it (keys sorted, indent 2: q25deploy's
    # json_bytes and state_body alike), every value as schema.parse_state checks it; status 1 if not
    awk '
    function hex(v, n) { return length(v) == n + 2 && v ~ /^"[0-9a-f]+"$/ }
    function rel(v) {
        return v != "\"release.json\"" && v ~ /^"[A-Za-z0-9_][A-Za-z0-9._+-]*(\/[A-Za-z0-9_][A-Za-z0-9._+-]*)*"$/
    }
    function plain(v) { return length(v) <= 130 && v ~ /^"[A-Za-z0-9][A-Za-z0-9._+-]*"$/ }
    function fail() { bad = 1; exit 1 }
    function at(ind, key) { return substr(L[i], 1, length(ind) + length(key) + 4) == ind "\"" key "\": " }
    function take(ind, key,    v) {  # the value of line i, "KEY": VALUE at IND (sets comma)
        if (!at(ind, key)) fail()
        v = substr(L[i++], length(ind) + length(key) + 5)
        comma = v ~ /,$/; if (comma) v = substr(v, 1, length(v) - 1)
        return v
    }
    function files(id,    k) {
        do {
            k = L[i++]
            if (k !~ /^        ".*": \[$/) fail()
            k = substr(k, 9, length(k) - 11)
            if (!rel(k) || ((id, k) in seen)) fail()
            seen[id, k] = 1
            if (L[i] !~ /^          "[0-9a-f]+",$/ || !hex(substr(L[i], 11, length(L[i]) - 11), 64)) fail()
            i++
            if (L[i++] !~ /^          [0-9]+$/) fail()
            k = L[i++]
            if (k != "        ]," && k != "        ]") fail()
        } while (k == "        ],")
        if (L[i++] != "      },") fail()
    }
    function forward(    v) {  # the forward pass a deploy recorded (q25deploy/deploy/state/forward_known.py)
        v = take(I "  ", "key"); if (!hex(v, 64) || !comma) fail()
        v = take(I "  ", "prompts"); if (v !~ /^[0-9]+$/) fail()
        if (comma) { v = take(I "  ", "release"); if (!hex(v, 16) || comma) fail() }
        if (L[i++] != "      },") fail()
    }
    function record(id,    v) {
        if (at(I, "deployed_at")) { v = take(I, "deployed_at"); if (v !~ /^"[0-9TZ:.+-]*"$/ || !comma) fail() }
        v = take(I, "files")
        if (v == "{") files(id); else if (v != "{}" || !comma) fail()
        if (at(I, "forward")) { if (take(I, "forward") != "{") fail(); forward() }
        if (at(I, "image")) { v = take(I, "image"); if (!(v == "null" || rel(v)) || !comma) fail() }
        if (at(I, "model_sha256")) { v = take(I, "model_sha256"); if (!(v == "null" || hex(v, 64)) || !comma) fail() }
        if (at(I, "target")) { v = take(I, "target"); if (!(v == "null" || plain(v)) || !comma) fail() }
        v = take(I, "vocab_fingerprint"); if (!hex(v, 64) || comma) fail()
        v = L[i++]; if (v != "    }," && v != "    }") fail()
        return v == "    },"
    }
    { L[NR] = $0 }
    END {
        if (bad) exit 1
        I = "      "; i = 1
        if (L[i++] != "{") fail()
        cur = take("  ", "current"); if (!(cur == "null" || hex(cur, 16)) || !comma) fail()
        if (take("  ", "format") != "\"q25deploy-board-state/1\"" || !comma) fail()
        prev = take("  ", "previous"); if (!(prev == "null" || hex(prev, 16)) || !comma) fail()
        v = take("  ", "releases"); if (comma) fail()
        if (v == "{") {
            do {
                v = L[i++]
                if (v !~ /^    "[0-9a-f]+": \{$/) fail()
                id = substr(v, 5, length(v) - 7)
                if (!hex(id, 16) || (id in ids)) fail()
                ids[id] = 1
            } while (record(id))
            if (L[i++] != "  }") fail()
        } else if (v != "{}") fail()
        if (L[i++] != "}" || i <= NR) fail()
        if ((cur != "null" && !(cur in ids)) || (prev != "null" && !(prev in ids))) fail()
    }' "$1"
}

state_ok() {  # FILE: a record of ours (own_record) in the state file's format, or die
    own_record "$1"
    [ ! -e "$1" ] || state_valid "$1" ||
        die "$1: '$(head -c 80 "$1" | tr -d '\n')' is not what q25-ota wrote there (a board state as q25deploy writes it)"
}

state_field() {  # RID FIELD -> a field of that release's record in the state file
    state_ok "$STATE"; [ -f "$STATE" ] || return 0
    awk -v rid="$1" -v key="$2" '
        /^    "[0-9a-f]+": \{$/ { cur = $1; gsub(/[":]/, "", cur) }
        cur == rid && $1 == "\"" key "\":" { v = $2; gsub(/[",]/, "", v); print v; exit }' "$STATE"
}

state_top() {  # KEY -> "current"/"previous" of the state file ("" when null or absent)
    state_ok "$STATE"; [ -f "$STATE" ] || return 0
    q_v=$(json_value "$STATE" "$1")
    case "$q_v" in ''|null) return 0 ;; esac
    q_in=${q_v#\"}; q_in=${q_in%\"}
    { [ "\"$q_in\"" = "$q_v" ] && is_rid "$q_in"; } || die "$STATE: $1 is $q_v, not a release id"
    echo "$q_in"
}

# -- writing our files: a fresh temporary beside the name, renamed over it ----------------------
put() {  # FILE: standard input into FILE (never through a link, never onto a directory)
    no_link "$1"; [ -d "$1" ] && die "$1 is a directory"
    q_tmp=$(mktemp "$1.XXXXXX") || die "cannot create a temporary beside $1"
    # synced before the rename (no empty file) and after it (the engine reports success next:
    # a power cut after that must find the file; found by the emulated board's write log)
    { cat > "$q_tmp" && chmod 0644 "$q_tmp" && sync && mv -f "$q_tmp" "$1" && sync; } || { rm -f "$q_tmp"; die "cannot write $1"; }
}

# -- writing release.json and the state file as q25deploy does ------------------------------
write_release_json() {  # FILES-LIST(text) MODEL-JSON TARGET-JSON OUT -> prints the release id
    body=$(printf '%s\n' "$1" | awk -v fp="$FPR" -v model="$2" -v target="$3" '
        { f = f (NR > 1 ? ", " : "") "{\"path\": \"" $3 "\", \"sha256\": \"" $1 "\", \"size\": " $2 "}" }
        END { printf "{\"files\": [%s], \"format\": \"q25deploy-release/1\", \"model_sha256\": %s, \"target\": %s, \"vocab_fingerprint\": \"%s\"}", f, model, target, fp }')
    rid=$(printf '%s' "$body" | sha256sum | cut -c1-16)
    printf '%s\n' "$1" | awk -v fp="$FPR" -v model="$2" -v target="$3" -v rid="$rid" '
        BEGIN { print "{"; print "  \"files\": [" }
        { if (NR > 1) print "    },"; print "    {"; print "      \"path\": \"" $3 "\","
          print "      \"sha256\": \"" $1 "\","; print "      \"size\": " $2 }
        END { if (NR) print "    }"; print "  ],"; print "  \"format\": \"q25deploy-release/1\","
              print "  \"id\": \"" rid "\","; print "  \"model_sha256\": " model ","
              print "  \"target\": " target ","; print "  \"vocab_fingerprint\": \"" fp "\""; print "}" }' > "$4"
    echo "$rid"
}

state_record() {  # RID DEPLOYED-AT IMAGE LAST(0|1)
    rj="$BASE/releases/$1/release.json"
    no_link "$BASE/releases/$1"
    # (release_files: root's record, one name; and the release it names)
    files=$(release_files "$rj") || exit 1
    [ "$(json_value "$rj" id)" = "\"$1\"" ] || die "$rj: its id is not $1: not the release.json of releases/$1"
    model=$(json_checked "$rj" model_sha256 hex64 1) &&
        target=$(json_checked "$rj" target name 1) && vf=$(json_checked "$rj" vocab_fingerprint hex64 0) || exit 1
    echo "    \"$1\": {"
    echo "      \"deployed_at\": \"$2\","
    echo "      \"files\": {"
    printf '%s\n' "$files" | awk 'NF { if (n++) print "        ],"; print "        \"" $3 "\": ["
                                       print "          \"" $1 "\","; print "          " $2 }
                                  END { if (n) print "        ]" }'
    echo "      },"
    echo "      \"image\": \"$3\","
    echo "      \"model_sha256\": $model,"
    echo "      \"target\": $target,"
    echo "      \"vocab_fingerprint\": $vf"
    [ "$4" = 1 ] && echo "    }" || echo "    },"
}

write_state() {  # NEW-ID PREVIOUS-ID(or "") NOW
    q_body=$(state_body "$@") || exit 1
    printf '%s\n' "$q_body" | put "$STATE" || exit 1
}

state_body() {  # NEW-ID PREVIOUS-ID(or "") NOW -> the state file's text
    new=$1; prev=$2
    prev_at=''; prev_image=''
    if [ -n "$prev" ]; then
        prev_at=$(state_field "$prev" deployed_at); prev_image=$(state_field "$prev" image)
        case "$prev_at" in *[!0-9TZ:.+-]*) die "$STATE: bad deployed_at of $prev" ;; esac
        [ -z "$prev_image" ] || is_rel "$prev_image" || die "$STATE: bad image of $prev"
    fi
    body=$(
        echo "{"
        echo "  \"current\": \"$new\","
        echo "  \"format\": \"q25deploy-board-state/1\","
        if [ -n "$prev" ]; then echo "  \"previous\": \"$prev\","; else echo "  \"previous\": null,"; fi
        echo "  \"releases\": {"
        for rid in $(printf '%s\n' "$new" ${prev:+"$prev"} | LC_ALL=C sort -u); do
            last=0; [ "$rid" = "$(printf '%s\n' "$new" ${prev:+"$prev"} | LC_ALL=C sort -u | tail -n 1)" ] && last=1
            if [ "$rid" = "$new" ]; then state_record "$rid" "$3" "$IMAGE" "$last" || exit 1
            else state_record "$rid" "${prev_at:-$3}" "${prev_image:-tokenizer.q25tokrt}" "$last" || exit 1; fi
        done
        echo "  }"
        echo "}"
    ) || exit 1
    printf '%s\n' "$body"
}

settle() {  # a cut between an install's switch and its state write (a disk's lost write cache leaves
    # that): current names the release this script's records say it was installing, the state file
    # the one before; the state that install recorded for after its switch becomes the state
    [ -f "$OTA/new" ] && [ -f "$OTA/state.new" ] && [ -L "$BASE/current" ] || return 0
    no_link "$OTA/state.new"
    q_new=$(ota_get new rid) || exit 1
    q_old=$(ota_get old rid-or-empty) || exit 1
    q_link=$(current_release) || exit 1
    q_cur=$(state_top current) || exit 1
    { [ "$q_link" = "$q_new" ] && [ "$q_cur" = "$q_old" ] && [ "$q_cur" != "$q_new" ]; } || return 0
    # root's record of the state after that switch: read as one (state_ok), and that switch's
    # state; else this install fails here and the engine's rollback takes nothing from it either
    state_ok "$OTA/state.new"
    [ "$(json_value "$OTA/state.new" current)" = "\"$q_new\"" ] ||
        die "$OTA/state.new: '$(head -c 80 "$OTA/state.new" | tr -d '\n')' is not what q25-ota wrote there (its current is not $q_new)"
    put "$STATE" < "$OTA/state.new" || exit 1
    say "finished the switch to releases/$q_new that an earlier install was cut in (the state file said ${q_old:-nothing})"
}

switch_current() {  # RID: one rename where mv has -T; BusyBox's mv falls back to ln -sfn
    no_link "$BASE/releases/$1"
    if [ -e "$BASE/current" ] || [ -L "$BASE/current" ]; then
        [ -L "$BASE/current" ] || die "$BASE/current is not a symlink: refusing to replace it"
    fi
    { rm -f "$BASE/.current.tmp" && ln -s -n "releases/$1" "$BASE/.current.tmp"; } || die "cannot link current"
    mv -T -f "$BASE/.current.tmp" "$BASE/current" 2>/dev/null && return 0
    rm -f "$BASE/.current.tmp"; ln -sfn "releases/$1" "$BASE/current" || die "cannot switch current"
    say "switched current with ln -sfn (this mv has no -T): not atomic"
}

current_release() {  # -> the id current points at (releases/<id>, a directory, not a link)
    no_link "$BASE/releases"
    q_l=$(readlink "$BASE/current") || die "$BASE/current is not a symlink"
    q_id=${q_l#releases/}
    { [ "releases/$q_id" = "$q_l" ] && is_rid "$q_id"; } || die "$BASE/current points at '$q_l', not at a release"
    no_link "$BASE/releases/$q_id"; [ -d "$BASE/releases/$q_id" ] || die "$BASE/current points at nothing"
    echo "$q_id"
}

verify_release() {  # DIR: every file of DIR/release.json is a regular file (no link) of its sha256
    files=$(release_files "$1/release.json") || exit 1
    for rel in $(printf '%s\n' "$files" | awk '{ print $3 }'); do
        no_link_in "$1" "$rel"; [ -f "$1/$rel" ] || { echo "q25-ota: $1/$rel: not a regular file" >&2; return 1; }
    done
    (cd "$1" && printf '%s\n' "$files" | awk 'NF { print $1 "  " $3 }' | sha256sum -c - >/dev/null)
}

# -- reserved memory: the plan's regions in the running device tree, and q25tok load|verify ------
unheld_regions() {  # -> "NODE [0xBASE, 0xEND) WHY" per region line the running device tree does not
    # hold: a node of that name under reserved-memory whose reg is <BASE SIZE> (two address and two
    # size cells, big-endian, as the build's reserved-memory.dtsi writes it) and that is no-map
    grep '^region ' "$PLAN" | while read -r _ node base size; do
        q_n="$DT_LIVE/reserved-memory/$node"
        q_want=$(echo "$base$size" | sed 's/../ &/g')
        if [ ! -f "$q_n/reg" ]; then q_why=absent
        elif [ "$(od -An -v -tx1 "$q_n/reg" | tr -s ' \n' '  ' | sed 's/ *$//')" != "$q_want" ]; then
            q_why="reserves another range"
        elif [ ! -e "$q_n/no-map" ]; then q_why="not no-map"
        else continue; fi
        printf '%s [0x%x, 0x%x) %s\n' "$node" "$((0x$base))" "$((0x$base + 0x$size))" "$q_why"
    done
}

check_reserved() {  # a full plan: refused before staging when the board cannot hold its regions
    [ "$MODE" = full ] || return 0  # tokenizer-only: the current release's region table stays
    q_miss=$(unheld_regions)
    [ -n "$q_miss" ] || return 0
    q_list=$(printf '%s\n' "$q_miss" | awk '{ printf "%s%s", (NR > 1 ? ", " : ""), $0 }')
    q_why="the board's $DT/reserved-memory does not reserve $(printf '%s\n' "$q_miss" | wc -l | tr -d ' ') of the release's $(grep -c '^region ' "$PLAN") region(s) ($q_list)"
    if [ "$UNRESERVED" = allow ]; then say "warning: $q_why; installing anyway (the plan allows it): its partitions will not be in reserved memory"; return 0; fi
    die "refusing release $RELEASE: $q_why: boot an image whose device tree includes the build's reserved-memory.dtsi, or package with --allow-unreserved; nothing was staged"
}

pick_q25tok() {  # the plan's q25tok, the image's: never a release's, never one found on PATH
    # (a release's q25tok lies in the install dir, which the deploy user can write; the plan's path
    # is outside it, load_plan; the package manager installed it: owned by root, who runs this)
    no_link "$Q25TOK"
    { [ -f "$Q25TOK" ] && [ -x "$Q25TOK" ]; } ||
        die "no q25tok at $Q25TOK (the image's q25-tokenizer-runtime package installs it): root runs no other"
    [ -O "$Q25TOK" ] || die "$Q25TOK is not owned by the user running q25-ota: refusing to run it"
}

regions() {  # load|verify RELEASE-DIR: q25tok on its region table through the board's memory
    q_rid=${2##*/}; q_tab="$2/partitions/regions.tab"
    no_link "$2/partitions" "$q_tab"; no_fifo "$q_tab"  # a FIFO there is refused, not "no table"
    [ -f "$q_tab" ] || { say "releases/$q_rid has no region table: nothing to $1"; return 0; }
    pick_q25tok
    if [ "$1" = load ]; then  # loaded this boot with this table (a tokenizer-only update): kept
        q_want="$(cat /proc/sys/kernel/random/boot_id 2>/dev/null) $(sha256sum < "$q_tab" | cut -d' ' -f1)"
        own_record "$LOADED"
        if [ -f "$LOADED" ] && [ "$(cat "$LOADED")" = "$q_want" ]; then
            say "the reserved regions already hold the partitions of releases/$q_rid's region table"; return 0
        fi
        # a load cut half-way leaves no stamp: the next load copies again (what cannot be removed,
        # a planted directory, fails the step: the stamp would say nothing true)
        if [ -e "$LOADED" ] || [ -L "$LOADED" ]; then rm -f "$LOADED" || die "cannot remove $LOADED"; fi
    fi
    q_out=$("$Q25TOK" "$1" --mem "$MEM_LIVE" --dt "$DT_LIVE" "$q_tab"); q_st=$?
    printf '%s\n' "$q_out" | grep '^region ' | sed 's/^/q25-ota: /' >&3
    if [ "$q_st" = 0 ]; then
        if [ "$1" = load ]; then echo "$q_want" | put "$LOADED" || die "loaded releases/$q_rid, but cannot record it in $LOADED"; fi
        say "$1: the reserved regions hold the partitions of releases/$q_rid"; return 0
    fi
    q_bad=$(printf '%s\n' "$q_out" | grep '^region ' | grep -v ' loaded$' | grep -v ' resident$')
    if [ "$q_st" = 6 ] && [ -n "$q_bad" ] && ! printf '%s\n' "$q_bad" | grep -q -v ' REFUSED ' &&
        [ "$UNRESERVED" = allow ]; then
        say "warning: the running device tree does not reserve releases/$q_rid's regions (the plan allows it): its partitions are not in reserved memory"
        return 0
    fi
    die "q25tok $1 failed on releases/$q_rid (exit $q_st): $(printf '%s\n' "${q_bad:-${q_out:-no report}}" | head -n 2 | tr '\n' ' ')"
}

# -- install ---------------------------------------------------------------------------------
# One mode for a release, whatever installs it (deploy, the layer's recipe, Mender, SWUpdate):
# files 0644 (a program that does not run as root reads the tokenizer image), q25tok 0755,
# directories 0755. The engines' files come out 0600 (SWUpdate's rawfile handler, the Mender
# client's file tree): the staged release gets its modes after it is verified, before it is
# moved in. Root chmods only what it placed itself: a payload file of one name it linked or
# copied (place), the release.json it wrote, the directories it made. A file linked from the
# current release may have other names (the previous release's; a hard link planted to a file
# elsewhere, where fs.protected_hardlinks=0): it must already have its mode (own_file), never
# gets one.
mode_of() {  # REL -> the ls mode string a release file has
    case "$1" in q25tok) echo -rwxr-xr-x ;; *) echo -rw-r--r-- ;; esac
}

set_modes() {  # STAGING: the directory, release.json, every file it lists and their directories
    # (only paths release.json names, each checked and no part of it a link: never what find lists)
    no_link "$1" "$1/release.json"
    q_placed=$(plan_rels)
    { chmod 0755 "$1" && chmod 0644 "$1/release.json"; } || die "cannot set modes in $1"
    release_files "$1/release.json" | while read -r _ _ rel; do
        no_link_in "$1" "$rel"
        if printf '%s\n' "$q_placed" | grep -Fxq -- "$rel"; then  # placed: one name, or the payload's and ours
            q_n=$(ls_meta "$1/$rel"); q_n=${q_n#* }; q_n=${q_n%% *}
            case "$q_n" in 1|2) ;; *) die "$1/$rel has $q_n names: root changes no mode of a file another name may be anywhere" ;; esac
            q_m=0644; [ "$rel" = q25tok ] && q_m=0755
            chmod "$q_m" "$1/$rel" || exit 1
        else
            own_file "$1/$rel" "$(mode_of "$rel")"  # linked from the current release: as it is
        fi
        q_r=$rel
        while :; do case "$q_r" in */*) q_r=${q_r%/*}; chmod 0755 "$1/$q_r" || exit 1 ;; *) break ;; esac; done
    done || die "cannot set modes in $1"
}

modes_set() {  # RELEASE-DIR: it has the release's modes, and its files are ours (a kept release: used as it is)
    [ "$(ls_meta "$1" | cut -d' ' -f1,3)" = "drwxr-xr-x $ME" ] &&
        [ "$(ls_meta "$1/release.json" | cut -d' ' -f1,3)" = "-rw-r--r-- $ME" ] || return 1
    release_files "$1/release.json" | while read -r _ _ rel; do
        [ "$(ls_meta "$1/$rel" | cut -d' ' -f1,3)" = "$(mode_of "$rel") $ME" ] || exit 1
        q_r=$rel
        while :; do
            case "$q_r" in */*) q_r=${q_r%/*} ;; *) break ;; esac
            [ "$(ls_meta "$1/$q_r" | cut -d' ' -f1,3)" = "drwxr-xr-x $ME" ] || exit 1
        done
    done
}

place() {  # SRC DST: a hard link when on one filesystem and SRC has no other name, else a copy;
    # never onto an existing name (what root places it may chmod: set_modes)
    no_link "$1"; [ -f "$1" ] || die "$1: not a regular file"
    if [ -e "$2" ] || [ -L "$2" ]; then die "$2 exists already: refusing to write onto it"; fi
    q_n=$(ls_meta "$1"); q_n=${q_n#* }; q_n=${q_n%% *}
    if [ "$q_n" = 1 ] && ln "$1" "$2" 2>/dev/null; then return 0; fi
    cp "$1" "$2" || die "cannot copy $1"
}

stage_full() {  # STAGING
    grep '^file ' "$PLAN" | while read -r _ sha size name rel; do
        src=$(payload "$name") && mkdir -p "$(dirname "$1/$rel")" && place "$src" "$1/$rel" || exit 1
    done || die "staging failed"
    src=$(payload release.json) || exit 1
    no_fifo "$src"; cp "$src" "$1/release.json" || die "cannot copy $src"  # a record of one name: a copy
    [ "$(json_value "$1/release.json" id)" = "\"$RELEASE\"" ] || die "release.json does not describe $RELEASE"
}

stage_tokenizer() {  # STAGING -> sets RELEASE (computed like deploy --tokenizer-only)
    cur=$(state_top current) || exit 1
    [ -z "$cur" ] || no_link "$BASE/releases/$cur"
    { [ -n "$cur" ] && [ -f "$BASE/releases/$cur/release.json" ]; } ||
        die "nothing is deployed on this board yet: install a full release before a tokenizer-only one"
    have=$(state_field "$cur" vocab_fingerprint)
    [ "$have" = "$FPR" ] || die "refusing the tokenizer-only update: vocabulary fingerprint $FPR differs from the deployed model's $have"
    rels=$(plan_rels)
    kept=$(release_files "$BASE/releases/$cur/release.json") || exit 1
    list=$(
      printf '%s\n' "$kept" | while read -r sha size rel; do  # the plan's paths are exact: no pattern
          [ -n "$rel" ] || continue
          printf '%s\n' "$rels" | grep -Fxq -- "$rel" && continue
          no_link_in "$BASE/releases/$cur" "$rel"
          own_file "$BASE/releases/$cur/$rel" "$(mode_of "$rel")"  # linked as it is: never chmodded
          mkdir -p "$(dirname "$1/$rel")" && ln "$BASE/releases/$cur/$rel" "$1/$rel" || exit 1
          echo "$sha $size $rel"
      done || die "cannot link the current release's files"
      grep '^file ' "$PLAN" | while read -r _ sha size name rel; do
          src=$(payload "$name") && mkdir -p "$(dirname "$1/$rel")" && place "$src" "$1/$rel" || exit 1
          echo "$sha $size $rel"
      done || die "staging failed"
    ) || exit 1
    list=$(printf '%s\n' "$list" | LC_ALL=C sort -k3)
    rj="$BASE/releases/$cur/release.json"
    model=$(json_checked "$rj" model_sha256 hex64 1) && target=$(json_checked "$rj" target name 1) || exit 1
    RELEASE=$(write_release_json "$list" "$model" "$target" "$1/release.json") || exit 1
}

install_release() {  # DIR: stage, verify, rename into place, switch, record (like deploy)
    load_plan "$1"
    check_reserved
    mkdir -p "$BASE/releases" "$OTA" || die "cannot create $BASE/releases"
    no_link "$BASE/releases" "$OTA"
    own_tree "$BASE" install  # again: what mkdir -p found there already is not taken on trust
    settle
    old=$(state_top current) || exit 1
    staging="$BASE/releases/.incoming-ota"
    rm -rf "$staging" "$staging.files"; mkdir "$staging" || die "cannot create $staging"
    if [ "$MODE" = full ]; then stage_full "$staging"; else stage_tokenizer "$staging"; fi
    no_link "$BASE/releases/$RELEASE"
    if [ "$old" = "$RELEASE" ] && [ -d "$BASE/releases/$RELEASE" ]; then
        rm -rf "$staging"; say "release $RELEASE is already current"  # nothing to roll back
        regions load "$BASE/releases/$RELEASE"; return 0  # unless this boot loaded them
    fi
    # verified before any mode changes: what root chmods is what release.json lists, its bytes
    (verify_release "$staging") || { rm -rf "$staging"; die "verify failed on the board; the current release is unchanged"; }
    (set_modes "$staging") || { rm -rf "$staging"; exit 1; }
    sync
    created=0
    kept="$BASE/releases/$RELEASE"
    if [ -d "$kept" ] && [ ! -L "$kept/release.json" ] && [ -f "$kept/release.json" ] && cmp -s "$staging/release.json" "$kept/release.json" &&
        (verify_release "$kept" && modes_set "$kept") 2>/dev/null; then
        rm -rf "$staging"  # kept from before, the same release.json, it verifies, its modes: used as it is
    else
        if [ -d "$BASE/releases/$RELEASE" ]; then  # what a cut left of a prune, or a damaged copy: the
            # staging (verified) is this very release (ids are contents), never the current one here
            say "releases/$RELEASE on the board does not verify (a cut rm -rf, or damage) or lacks the release's modes: replaced"
            rm -rf "$BASE/releases/$RELEASE" || die "cannot remove $BASE/releases/$RELEASE"
        fi
        { mv "$staging" "$BASE/releases/$RELEASE" && created=1; } || die "cannot move the staged release into place"
    fi
    sync
    # what ArtifactRollback needs: the old state and current release, and whether ours is new
    rm -f "$OTA/state.old"; if [ -f "$STATE" ]; then put "$OTA/state.old" < "$STATE"; fi
    for q_rec in "old $old" "created $created" "new $RELEASE"; do
        echo "${q_rec#* }" | put "$OTA/${q_rec%% *}" || exit 1
    done
    # the state after the switch, recorded before it: a cut between the two is settled from it
    q_state=$(state_body "$RELEASE" "$old" "$(date -u +%Y-%m-%dT%H:%M:%SZ)") || exit 1
    printf '%s\n' "$q_state" | put "$OTA/state.new" || exit 1
    switch_current "$RELEASE"
    printf '%s\n' "$q_state" | put "$STATE" || exit 1
    for rdir in "$BASE"/releases/*; do  # older releases go (only ours: release ids under releases/)
        rid=${rdir##*/}
        is_rid "$rid" && [ ! -L "$rdir" ] && [ -d "$rdir" ] && [ "$rid" != "$RELEASE" ] && [ "$rid" != "$old" ] &&
            rm -rf "$rdir"
    done
    regions load "$BASE/releases/$RELEASE"  # a failure fails the update: the engine rolls back
    say "installed release $RELEASE"
}

# -- smoke test and rollback -------------------------------------------------------------------
smoke() {  # DIR: every file's sha256 of the current release, then q25tok info and every prompt's ids
    load_plan "$1"
    rid=$(current_release) || exit 1
    cur="$BASE/releases/$rid"
    verify_release "$cur" || die "smoke: a file of the current release fails its sha256"
    pick_q25tok  # the image's (never the release's: the install dir is not root's alone)
    no_link "$cur/$IMAGE"; no_fifo "$cur/$IMAGE"
    "$Q25TOK" info "$cur/$IMAGE" >/dev/null || die "smoke: q25tok info failed on $cur/$IMAGE"
    grep '^smoke ' "$PLAN" | while read -r _ name special ids; do
        flag=''; [ "$special" = 1 ] && flag=--special
        src=$(payload "$name") || exit 1
        got=$("$Q25TOK" encode $flag "$cur/$IMAGE" < "$src" | tr -s ' \n' ',,' | sed 's/^,//; s/,$//')
        [ "$got" = "$ids" ] || { echo "q25-ota: smoke: $name: board ids differ from the host's" >&2; exit 1; }
    done || exit 1
    regions verify "$cur"  # the reserved regions hold its partitions
    forward_smoke "$cur"  # and they compute what the host computed
    say "smoke test passed on releases/$rid"
}

# -- the forward pass against the host's: q25tok generate --files per prompt of the forward file,
# its dump compared by q25tok compare (q25tok_compare.c: record_compare.py's rules, with the
# tolerances the forward file carries; docs/forward.md)
forward_smoke() {  # RELEASE-DIR: every prompt of the plan's forward file (a full release's, this one's)
    q_name=$(plan_get forward)
    [ -n "$q_name" ] || return 0  # a tokenizer-only plan, or a build without a forward record
    q_tab="$1/partitions/regions.tab"; q_tt="$1/partitions/tensors.tab"; q_hp="$1/model_hparams.txt"
    no_link "$1/partitions" "$q_tab" "$q_tt" "$q_hp"; no_fifo "$q_tab" "$q_tt" "$q_hp"
    if [ "${1##*/}" != "$RELEASE" ] || [ ! -f "$q_tab" ] || [ ! -f "$q_tt" ] || [ ! -f "$q_hp" ]; then
        say "smoke: releases/${1##*/} is not the plan's release with its tensor table and hyperparameters: forward pass not checked"
        return 0
    fi
    q_exp=$(payload "$q_name") || exit 1; no_fifo "$q_exp"
    [ "$(head -n 1 "$q_exp")" = "q25-forward 2" ] || die "smoke: $q_exp: not a forward file this script reads"
    q_n=$(grep -c '^prompt ' "$q_exp"); [ "$q_n" -gt 0 ] || die "smoke: $q_exp: no prompt in the forward file"
    q_out=$(mktemp) || die "smoke: cannot create a temporary file"
    grep '^prompt ' "$q_exp" | while read -r _ n q_k1 steps q_k2 ids extra; do  # prompt N steps S ids ID,... (forced)
        { is_digits "$n" && is_digits "$steps" && [ "$q_k1 $q_k2" = "steps ids" ] && [ -z "$extra" ] &&
            case "$ids" in ''|*[!0-9,]*) false ;; esac; } || die "smoke: $q_exp: bad prompt line '$n'"
        # shellcheck disable=SC2046  # ids is digits and commas (checked above): one argument per id
        q_err=$("$Q25TOK" generate --files --dump-layers --positions "$steps" "$q_tab" "$q_tt" $(echo "$ids" | tr ',' ' ') 2>&1 >"$q_out")
        q_st=$?
        if [ "$q_st" = 2 ] && ! printf '%s\n' "$q_err" | grep -q -e '--positions'; then exit 3; fi  # an older q25tok
        [ "$q_st" = 0 ] || die "smoke: forward prompt $n: q25tok generate failed (exit $q_st): $(printf '%s\n' "$q_err" | head -n 2 | tr '\n' ' ')"
        q_diff=$("$Q25TOK" compare "$q_exp" "$n" "$q_out" 2>&1)
        q_st=$?
        if [ "$q_st" = 2 ] && ! printf '%s\n' "$q_diff" | grep -q 'q25tok compare'; then exit 4; fi  # an older q25tok
        case "$q_st" in
            0) [ -z "$q_diff" ] || say "smoke: forward prompt $n: $q_diff" ;;
            11) die "smoke: forward prompt $n $q_diff" ;;  # step S: WHERE: DETAIL
            *) die "smoke: forward prompt $n: $(printf '%s\n' "$q_diff" | head -n 2 | tr '\n' ' ' | sed 's/ $//')" ;;
        esac
    done
    q_st=$?; rm -f "$q_out"
    case "$q_st" in
        0) say "smoke: the forward pass agrees with the host's on $q_n prompt(s) (q25tok generate --files)" ;;
        3) say "warning: smoke: $Q25TOK has no generate --positions (an older image): the forward pass is not checked" ;;
        4) say "warning: smoke: $Q25TOK has no compare command (an older image): the forward pass is not checked" ;;
        *) exit 1 ;;
    esac
}

ota_get() {  # NAME KIND(rid|rid-or-empty|flag): a rollback record, as strictly as the plan
    own_record "$OTA/$1"
    q_v=$(cat "$OTA/$1" 2>/dev/null)
    case "$2" in
        rid) is_rid "$q_v" ;;
        rid-or-empty) [ -z "$q_v" ] || is_rid "$q_v" ;;
        flag) case "$q_v" in 0|1) ;; *) false ;; esac ;;
    esac || die "$OTA/$1: '$q_v' is not what q25-ota wrote there"
    echo "$q_v"
}

rollback() {  # DIR: back to the release that was current before this update
    load_plan "$1"
    no_link "$OTA/new"
    [ -f "$OTA/new" ] || { say "nothing to roll back"; return 0; }
    old=$(ota_get old rid-or-empty) && new=$(ota_get new rid) && created=$(ota_get created flag) || exit 1
    # the state before the update, root's record of it: never copied unread (state_ok: one of
    # ours, one name, the state file's format) and the state whose current release was $old;
    # checked before anything is changed
    if [ -e "$OTA/state.old" ] || [ -L "$OTA/state.old" ]; then
        state_ok "$OTA/state.old"
        q_want=null; [ -z "$old" ] || q_want="\"$old\""
        [ "$(json_value "$OTA/state.old" current)" = "$q_want" ] ||
            die "$OTA/state.old: its current is not the release this update replaced (${old:-none}): not what q25-ota wrote there; nothing was rolled back"
    fi
    if [ -n "$old" ] && [ -d "$BASE/releases/$old" ]; then
        switch_current "$old"
    else
        rm -f "$BASE/current"
    fi
    if [ -f "$OTA/state.old" ]; then put "$STATE" < "$OTA/state.old"; rm -f "$OTA/state.old"; else rm -f "$STATE"; fi
    # only a release this update created goes (a kept previous one stays for the old state)
    [ "$created" = 1 ] && [ "$new" != "$old" ] && rm -rf "$BASE/releases/$new"
    rm -f "$OTA/old" "$OTA/new" "$OTA/created"; sync
    say "rolled back to ${old:-nothing}"
    # its partitions back into the regions; a device tree that does not reserve them is a warning
    # (the old release was not resident before this update either, whatever this plan says)
    if [ -n "$old" ] && [ -d "$BASE/releases/$old" ]; then
        (UNRESERVED=allow; regions load "$BASE/releases/$old") || die "rolled back to $old, but its regions did not load (above)"
    fi
}

cleanup() { load_plan "$1"; rm -rf "$OTA" "$BASE/releases/.incoming-ota"; }

case "${1:-}" in
    SupportsRollback) echo Yes ;;
    NeedsArtifactReboot) echo No ;;
    ProvidePayloadFileSizes) echo No ;;
    ArtifactInstall) install_release "$2/files" ;;
    ArtifactCommit) smoke "$2/files" ;;
    ArtifactRollback) rollback "$2/files" ;;
    Cleanup) if [ -f "$2/files/q25-plan" ]; then cleanup "$2/files" || true; fi ;;
    preinst)  # SWUpdate, before its files handler writes into the drop directory: a fresh one
        exec 3>&1
        [ -n "$Q25_SWU_DIR" ] || die "no payload directory set for SWUpdate"
        swu_dir="$ROOT$Q25_SWU_DIR"
        no_link "${swu_dir%/*}" "$swu_dir" "${swu_dir%/*}/releases"
        BASE=${swu_dir%/*}; own_tree "$BASE" install  # the install dir the drop directory is in
        { rm -rf "$swu_dir" && mkdir -p "$BASE" && mkdir -m 0700 "$swu_dir"; } || die "cannot create $swu_dir"
        own_tree "$BASE" install ;;
    postinst)
        exec 3>&1
        [ -n "$Q25_SWU_DIR" ] || die "no payload directory set for SWUpdate"
        swu_dir="$ROOT$Q25_SWU_DIR"
        if ! (install_release "$swu_dir"); then  # its error said why; no payload or staging is left behind
            rollback "$swu_dir"; cleanup "$swu_dir"; rm -rf "$swu_dir"; die "install failed: nothing was changed"
        fi
        if ! (smoke "$swu_dir"); then
            rollback "$swu_dir"; cleanup "$swu_dir"; rm -rf "$swu_dir"; die "smoke test failed: rolled back"
        fi
        cleanup "$swu_dir"; rm -rf "$swu_dir" ;;
    install) install_release "$2" ;;
    smoke) smoke "$2" ;;
    rollback) rollback "$2" ;;
    *) ;;  # other states and future queries: nothing to do (update module protocol)
esac
