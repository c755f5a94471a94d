#!/bin/sh
# q25-ota: installs a q25deploy release on the board from a Mender or SWUpdate payload, with
# the on-board layout of `q25deploy deploy` (POSIX sh; BusyBox sh, awk, sed, sha256sum).
#
#   Mender update module (/usr/share/mender/modules/v3/q25-release):  q25-ota STATE FILE-TREE
#   SWUpdate post-install script:                                     q25-ota postinst
#   by hand:                                                          q25-ota install|smoke DIR
#
# DIR holds the payload's flat files and the line-based plan `q25-plan` (values validated by
# q25deploy package). Under the install dir:
#   releases/<id>/  releases/.incoming-<id>/  current -> releases/<id>  .q25deploy-state.json
#   .q25-ota/       rollback data of the update in progress (old state, old current id)
# Q25_ROOT prefixes every board path (tests, chroots), like deploy's --remote-root.
set -u
ROOT="${Q25_ROOT:-}"
Q25_SWU_DIR=''  # set by `q25deploy package --format swupdate` (where the files handler writes)

die() { echo "q25-ota: $*" >&2; exit 1; }
say() { echo "q25-ota: $*" >&2; }

plan_get() { sed -n "s/^$1 //p" "$PLAN" | head -n 1; }

safe_rel() {  # a plain relative path (q25deploy package validated it; a crafted plan stops here)
    case "$1" in ''|/*|*..*|*[!A-Za-z0-9._/+-]*) die "unsafe path '$1' in the plan" ;; esac
}

load_plan() {  # DIR
    DIR=$1
    PLAN="$DIR/q25-plan"
    [ -f "$PLAN" ] || die "$PLAN: no plan in the payload"
    [ "$(head -n 1 "$PLAN")" = "q25-ota-plan 1" ] || die "$PLAN: not a plan this script reads"
    MODE=$(plan_get mode); RELEASE=$(plan_get release); FPR=$(plan_get fingerprint)
    INSTALL=$(plan_get install); Q25TOK=$ROOT$(plan_get q25tok); IMAGE=$(plan_get image)
    case "$MODE" in full|tokenizer) ;; *) die "bad mode '$MODE' in the plan" ;; esac
    case "$INSTALL" in /*) ;; *) die "bad install dir in the plan" ;; esac
    case "$RELEASE" in *[!0-9a-f]*|'') die "bad release id in the plan" ;; esac
    safe_rel "${INSTALL#/}"; safe_rel "$IMAGE"
    BASE="$ROOT$INSTALL"
    OTA="$BASE/.q25-ota"
    STATE="$BASE/.q25deploy-state.json"
}

# -- reading our own JSON (always written with indent=2, sort_keys) ------------------------
release_files() {  # RELEASE.JSON -> "sha256 size path" lines
    awk '/^      "path": /{p=$2} /^      "sha256": /{s=$2} /^      "size": /{z=$2;
         gsub(/[",]/,"",p); gsub(/[",]/,"",s); gsub(/[",]/,"",z); print s, z, p}' "$1"
}

json_value() {  # FILE KEY -> the raw JSON value of a top-level key
    sed -n "s/^  \"$2\": \(.*\)$/\1/p" "$1" | sed 's/,$//' | head -n 1
}

state_field() {  # RID FIELD -> a field of that release's record in the state file
    [ -f "$STATE" ] || return 0
    awk -v rid="$1" -v key="$2" '
        /^    "[0-9a-f]+": \{$/ { cur = $1; gsub(/[":]/, "", cur) }
        cur == rid && $1 == "\"" key "\":" { v = $2; gsub(/[",]/, "", v); print v; exit }' "$STATE"
}

state_top() {  # KEY -> "current"/"previous" of the state file ("" when null or absent)
    [ -f "$STATE" ] || return 0
    json_value "$STATE" "$1" | sed -n 's/^"\([0-9a-f]*\)"$/\1/p'
}

# -- writing release.json and the state file as q25deploy does ------------------------------
write_release_json() {  # FILES-LIST MODEL-JSON TARGET-JSON OUT -> prints the release id
    body=$(awk -v fp="$FPR" -v model="$2" -v target="$3" '
        { f = f (NR > 1 ? ", " : "") "{\"path\": \"" $3 "\", \"sha256\": \"" $1 "\", \"size\": " $2 "}" }
        END { printf "{\"files\": [%s], \"format\": \"q25deploy-release/1\", \"model_sha256\": %s, \"target\": %s, \"vocab_fingerprint\": \"%s\"}", f, model, target, fp }' "$1")
    rid=$(printf '%s' "$body" | sha256sum | cut -c1-16)
    awk -v fp="$FPR" -v model="$2" -v target="$3" -v rid="$rid" '
        BEGIN { print "{"; print "  \"files\": [" }
        { if (NR > 1) print "    },"; print "    {"; print "      \"path\": \"" $3 "\","
          print "      \"sha256\": \"" $1 "\","; print "      \"size\": " $2 }
        END { if (NR) print "    }"; print "  ],"; print "  \"format\": \"q25deploy-release/1\","
              print "  \"id\": \"" rid "\","; print "  \"model_sha256\": " model ","
              print "  \"target\": " target ","; print "  \"vocab_fingerprint\": \"" fp "\""; print "}" }' "$1" > "$4"
    echo "$rid"
}

state_record() {  # RID DEPLOYED-AT IMAGE LAST(0|1)
    rj="$BASE/releases/$1/release.json"
    echo "    \"$1\": {"
    echo "      \"deployed_at\": \"$2\","
    echo "      \"files\": {"
    release_files "$rj" | awk '{ if (NR > 1) print "        ],"; print "        \"" $3 "\": ["
                                 print "          \"" $1 "\","; print "          " $2 }
                               END { if (NR) print "        ]" }'
    echo "      },"
    echo "      \"image\": \"$3\","
    echo "      \"model_sha256\": $(json_value "$rj" model_sha256),"
    echo "      \"target\": $(json_value "$rj" target),"
    echo "      \"vocab_fingerprint\": $(json_value "$rj" vocab_fingerprint)"
    [ "$4" = 1 ] && echo "    }" || echo "    },"
}

write_state() {  # NEW-ID PREVIOUS-ID(or "") NOW
    new=$1; prev=$2; tmp="$STATE.tmp"
    prev_at=''; prev_image=''
    if [ -n "$prev" ]; then
        prev_at=$(state_field "$prev" deployed_at); prev_image=$(state_field "$prev" image)
    fi
    {
        echo "{"
        echo "  \"current\": \"$new\","
        echo "  \"format\": \"q25deploy-board-state/1\","
        if [ -n "$prev" ]; then echo "  \"previous\": \"$prev\","; else echo "  \"previous\": null,"; fi
        echo "  \"releases\": {"
        for rid in $(printf '%s\n' "$new" $prev | LC_ALL=C sort -u); do
            last=0; [ "$rid" = "$(printf '%s\n' "$new" $prev | LC_ALL=C sort -u | tail -n 1)" ] && last=1
            if [ "$rid" = "$new" ]; then state_record "$rid" "$3" "$IMAGE" "$last"
            else state_record "$rid" "${prev_at:-$3}" "${prev_image:-tokenizer.q25tokrt}" "$last"; fi
        done
        echo "  }"
        echo "}"
    } > "$tmp" || die "cannot write $tmp"
    sync; mv -f "$tmp" "$STATE"
}

switch_current() {  # RID: one rename where mv has -T; BusyBox's mv falls back to ln -sfn
    rm -f "$BASE/.current.tmp" && ln -s "releases/$1" "$BASE/.current.tmp" || die "cannot link current"
    mv -T -f "$BASE/.current.tmp" "$BASE/current" 2>/dev/null && return 0
    rm -f "$BASE/.current.tmp"; ln -sfn "releases/$1" "$BASE/current" || die "cannot switch current"
    say "switched current with ln -sfn (this mv has no -T): not atomic"
}

# -- install ---------------------------------------------------------------------------------
place() {  # SRC DST: a hard link when on one filesystem, else a copy
    ln "$1" "$2" 2>/dev/null || cp "$1" "$2" || die "cannot copy $1"
}

stage_full() {  # STAGING
    grep '^file ' "$PLAN" | while read -r _ sha size name rel; do
        safe_rel "$rel"; safe_rel "$name"
        mkdir -p "$(dirname "$1/$rel")" && place "$DIR/$name" "$1/$rel" || exit 1
    done || die "staging failed"
    place "$DIR/release.json" "$1/release.json"
    [ "$(json_value "$1/release.json" id)" = "\"$RELEASE\"" ] || die "release.json does not describe $RELEASE"
}

stage_tokenizer() {  # STAGING -> sets RELEASE (computed like deploy --tokenizer-only)
    cur=$(state_top current)
    [ -n "$cur" ] && [ -f "$BASE/releases/$cur/release.json" ] ||
        die "nothing is deployed on this board yet: install a full release before a tokenizer-only one"
    have=$(state_field "$cur" vocab_fingerprint)
    [ "$have" = "$FPR" ] || die "refusing the tokenizer-only update: vocabulary fingerprint $FPR differs from the deployed model's $have"
    list="$1.files"
    { release_files "$BASE/releases/$cur/release.json" | while read -r sha size rel; do
          grep -q "^file .* $rel\$" "$PLAN" && continue
          mkdir -p "$(dirname "$1/$rel")" && ln "$BASE/releases/$cur/$rel" "$1/$rel" || exit 1
          echo "$sha $size $rel"
      done || die "cannot link the current release's files"
      grep '^file ' "$PLAN" | while read -r _ sha size name rel; do
          safe_rel "$rel"; safe_rel "$name"
          mkdir -p "$(dirname "$1/$rel")" && place "$DIR/$name" "$1/$rel" || exit 1
          echo "$sha $size $rel"
      done || die "staging failed"
    } | LC_ALL=C sort -k3 > "$list"
    rj="$BASE/releases/$cur/release.json"
    RELEASE=$(write_release_json "$list" "$(json_value "$rj" model_sha256)" "$(json_value "$rj" target)" "$1/release.json")
    rm -f "$list"
}

install_release() {  # DIR: stage, verify, rename into place, switch, record (like deploy)
    load_plan "$1"
    mkdir -p "$BASE/releases" "$OTA" || die "cannot create $BASE/releases"
    old=$(state_top current)
    staging="$BASE/releases/.incoming-ota"
    rm -rf "$staging" "$staging.files"; mkdir -p "$staging"
    if [ "$MODE" = full ]; then stage_full "$staging"; else stage_tokenizer "$staging"; fi
    if [ "$old" = "$RELEASE" ] && [ -d "$BASE/releases/$RELEASE" ]; then
        rm -rf "$staging"; say "release $RELEASE is already current"; return 0  # nothing to roll back
    fi
    (cd "$staging" && release_files release.json | awk '{ print $1 "  " $3 }' | sha256sum -c - >/dev/null) ||
        { rm -rf "$staging"; die "verify failed on the board; the current release is unchanged"; }
    sync
    created=0
    if [ -d "$BASE/releases/$RELEASE" ]; then rm -rf "$staging"
    else mv "$staging" "$BASE/releases/$RELEASE" && created=1; fi
    sync
    # what ArtifactRollback needs: the old state and current release, and whether ours is new
    rm -f "$OTA/state.old"; [ -f "$STATE" ] && cp "$STATE" "$OTA/state.old"
    echo "$old" > "$OTA/old"; echo "$created" > "$OTA/created"; echo "$RELEASE" > "$OTA/new"
    switch_current "$RELEASE"
    write_state "$RELEASE" "$old" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    for rdir in "$BASE"/releases/*; do  # older releases go (only under releases/)
        rid=${rdir##*/}
        [ -d "$rdir" ] && [ "$rid" != "$RELEASE" ] && [ "$rid" != "$old" ] && rm -rf "$rdir"
    done
    say "installed release $RELEASE"
}

# -- smoke test and rollback -------------------------------------------------------------------
smoke() {  # DIR: q25tok info, every prompt's ids, every file's sha256 of the current release
    load_plan "$1"
    cur="$BASE/current"
    [ -x "$cur/q25tok" ] && Q25TOK="$cur/q25tok"  # a release that carries its own runtime
    "$Q25TOK" info "$cur/$IMAGE" >/dev/null || die "smoke: q25tok info failed on $cur/$IMAGE"
    grep '^smoke ' "$PLAN" | while read -r _ name special ids; do
        flag=''; [ "$special" = 1 ] && flag=--special
        got=$("$Q25TOK" encode $flag "$cur/$IMAGE" < "$DIR/$name" | tr -s ' \n' ',,' | sed 's/^,//; s/,$//')
        [ "$got" = "$ids" ] || { echo "q25-ota: smoke: $name: board ids differ from the host's" >&2; exit 1; }
    done || exit 1
    (cd "$cur" && release_files release.json | awk '{ print $1 "  " $3 }' | sha256sum -c - >/dev/null) ||
        die "smoke: a file of the current release fails its sha256"
    say "smoke test passed on $(readlink "$cur")"
}

rollback() {  # DIR: back to the release that was current before this update
    load_plan "$1"
    [ -f "$OTA/new" ] || { say "nothing to roll back"; return 0; }
    old=$(cat "$OTA/old" 2>/dev/null); new=$(cat "$OTA/new")
    if [ -n "$old" ] && [ -d "$BASE/releases/$old" ]; then
        switch_current "$old"
    else
        rm -f "$BASE/current"
    fi
    if [ -f "$OTA/state.old" ]; then mv -f "$OTA/state.old" "$STATE"; else rm -f "$STATE"; fi
    # only a release this update created goes (a kept previous one stays for the old state)
    [ "$(cat "$OTA/created" 2>/dev/null)" = 1 ] && [ "$new" != "$old" ] && rm -rf "$BASE/releases/$new"
    rm -f "$OTA/old" "$OTA/new" "$OTA/created"; sync
    say "rolled back to ${old:-nothing}"
}

cleanup() { load_plan "$1"; rm -rf "$OTA" "$BASE/releases/.incoming-ota"; }

case "${1:-}" in
    SupportsRollback) echo Yes ;;
    NeedsArtifactReboot) echo No ;;
    ProvidePayloadFileSizes) echo No ;;
    ArtifactInstall) install_release "$2/files" ;;
    ArtifactCommit) smoke "$2/files" ;;
    ArtifactRollback) rollback "$2/files" ;;
    Cleanup) [ -f "$2/files/q25-plan" ] && cleanup "$2/files" || true ;;
    postinst)
        [ -n "$Q25_SWU_DIR" ] || die "no payload directory set for SWUpdate"
        swu_dir="$ROOT$Q25_SWU_DIR"
        install_release "$swu_dir" || exit 1
        if ! (smoke "$swu_dir"); then
            rollback "$swu_dir"; cleanup "$swu_dir"; rm -rf "$swu_dir"; die "smoke test failed: rolled back"
        fi
        cleanup "$swu_dir"; rm -rf "$swu_dir" ;;
    install) install_release "$2" ;;
    smoke) smoke "$2" ;;
    rollback) rollback "$2" ;;
    *) ;;  # other states and future queries: nothing to do (update module protocol)
esac
