/*
 * The release steps (ota.h): install (stage, verify, modes, rename into place, switch, record,
 * load the regions), rollback and cleanup, with the on-board layout of `q25deploy deploy`:
 *   releases/<id>/  releases/.incoming-ota/  current -> releases/<id>  .q25deploy-state.json
 *   .q25-ota/  the rollback data of the update in progress (old state, old and new id, created)
 * Staging is ota_stage.c's. Only 16-hex directories under releases/ are ever removed. Every record of root's own is read as one (ota_own_record, ota_json.c).
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "ota.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* FILE: a board state of root's (own_record) in the state file's format: 1, 0 when absent */
static int state_ok(const char *file, ota_state *s)
{
    ota_own_record(file);
    size_t len;
    char *text = ota_read(file, OTA_MAX_RECORD, &len);
    if (!text)
        return 0;
    if (ota_state_parse(text, len, s) != 0) {
        char head[81];
        size_t k = 0;
        for (size_t i = 0; i < len && k < 80; i++)
            if (text[i] != '\n')
                head[k++] = text[i];
        head[k] = 0;
        ota_die("%s: '%s' is not what q25-ota wrote there (a board state as q25deploy writes it)", file, head);
    }
    free(text);
    return 1;
}

int ota_state_read(const ota_plan *p, ota_state *s)
{
    return state_ok(p->state, s);
}

/* a rollback record .q25-ota/NAME: KIND 'r' a release id, 'e' one or nothing, 'f' 0 or 1 */
static void ota_get(const ota_plan *p, const char *name, char kind, char out[17])
{
    char path[OTA_PATH];
    ota_path(path, OTA_PATH, "%s/%s", p->ota, name);
    ota_own_record(path);
    size_t len;
    char *v = ota_read(path, 64, &len);
    while (v && len && v[len - 1] == '\n')
        v[--len] = 0;
    int ok = v && strlen(v) == len &&
             (kind == 'r' ? ota_is_rid(v) : kind == 'e' ? (!*v || ota_is_rid(v)) : (!strcmp(v, "0") || !strcmp(v, "1")));
    if (!ok)
        ota_die("%s: '%s' is not what q25-ota wrote there", path, v ? v : "");
    strcpy(out, v);
    free(v);
}

static void put_line(const ota_plan *p, const char *name, const char *value)
{
    char path[OTA_PATH], line[32];
    ota_path(path, OTA_PATH, "%s/%s", p->ota, name);
    int n = snprintf(line, sizeof line, "%s\n", value);
    ota_put(path, line, (size_t)n);
}

void ota_current(const ota_plan *p, char rid[17])
{
    char releases[OTA_PATH], cur[OTA_PATH], link[OTA_PATH];
    ota_path(releases, OTA_PATH, "%s/releases", p->base);
    ota_no_link(releases);
    ota_path(cur, OTA_PATH, "%s/current", p->base);
    ssize_t n = readlink(cur, link, sizeof link - 1);
    if (n < 0)
        ota_die("%s is not a symlink", cur);
    link[n] = 0;
    if (strncmp(link, "releases/", 9) != 0 || !ota_is_rid(link + 9))
        ota_die("%s points at '%s', not at a release", cur, link);
    strcpy(rid, link + 9);
    ota_path(cur, OTA_PATH, "%s/%s", releases, rid);
    ota_no_link(cur);
    if (!ota_is_dir(cur))
        ota_die("%s/current points at nothing", p->base);
}

static char *state_body(const ota_plan *p, const ota_state *s, const char *new, const char *old, const char *image,
                        size_t *len)
{
    char rj[OTA_PATH], dir[OTA_PATH];
    ota_release nr, pr;
    const char *prev_at = "", *prev_image = "";
    const char *ids[2] = {new, *old && strcmp(old, new) ? old : NULL};
    ota_release *rs[2] = {&nr, &pr};
    for (int k = 0; k < 2 && ids[k]; k++) {
        ota_path(dir, OTA_PATH, "%s/releases/%s", p->base, ids[k]);
        ota_path(rj, OTA_PATH, "%s/release.json", dir);
        ota_no_link(dir);
        ota_read_release(rj, rs[k]);
        if (strcmp(rs[k]->id, ids[k]))
            ota_die("%s: its id is not %s: not the release.json of releases/%s", rj, ids[k], ids[k]);
    }
    if (ids[1]) {
        const ota_state_rec *rec = ota_state_find(s, old);
        if (rec)
            prev_at = rec->deployed_at, prev_image = rec->image;
        if (strspn(prev_at, "0123456789TZ:.+-") != strlen(prev_at))
            ota_die("%s: bad deployed_at of %s", p->state, old);
        if (*prev_image && !ota_is_rel(prev_image))
            ota_die("%s: bad image of %s", p->state, old);
    }
    char now[32];
    time_t t = time(NULL);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    char *body = ota_state_render(&nr, now, image, ids[1] ? &pr : NULL, prev_at, prev_image, len);
    ota_release_free(&nr);
    if (ids[1])
        ota_release_free(&pr);
    return body;
}

static void switch_current(const ota_plan *p, const char *rid)
{
    char dir[OTA_PATH], cur[OTA_PATH], tmp[OTA_PATH], target[32];
    ota_path(dir, OTA_PATH, "%s/releases/%s", p->base, rid);
    ota_no_link(dir);
    ota_path(cur, OTA_PATH, "%s/current", p->base);
    ota_path(tmp, OTA_PATH, "%s/.current.tmp", p->base);
    ota_meta m;
    if (ota_lmeta(cur, &m) && !S_ISLNK(m.mode))
        ota_die("%s is not a symlink: refusing to replace it", cur);
    snprintf(target, sizeof target, "releases/%s", rid);
    ota_rm_f(tmp);
    if (symlink(target, tmp) != 0)
        ota_die("cannot link current");
    if (rename(tmp, cur) != 0)
        ota_die("cannot switch current");
}

/* a cut between an install's switch and its state write: current names the release this
 * command's records say it was installing, the state file the one before: the state that
 * install recorded for after its switch becomes the state */
static void settle(const ota_plan *p)
{
    char nw[OTA_PATH], sn[OTA_PATH], cur[OTA_PATH], new[17], old[17], link_id[17];
    ota_path(nw, OTA_PATH, "%s/new", p->ota);
    ota_path(sn, OTA_PATH, "%s/state.new", p->ota);
    ota_path(cur, OTA_PATH, "%s/current", p->base);
    ota_meta m;
    if (!ota_lmeta(nw, &m) || !ota_lmeta(sn, &m) || !ota_lmeta(cur, &m) || !S_ISLNK(m.mode))
        return;
    ota_no_link(sn);
    ota_get(p, "new", 'r', new);
    ota_get(p, "old", 'e', old);
    ota_current(p, link_id);
    ota_state s = {0}, after = {0};
    const char *was = ota_state_read(p, &s) ? s.current : "";
    if (strcmp(link_id, new) || strcmp(was, old) || !strcmp(was, new))
        return;
    state_ok(sn, &after);
    if (strcmp(after.current, new))
        ota_die("%s: its current is not %s: not what q25-ota wrote there", sn, new);
    ota_put_copy(p->state, sn);
    ota_say("finished the switch to releases/%s that an earlier install was cut in (the state file said %s)", new,
            *old ? old : "nothing");
    ota_state_free(&s);
    ota_state_free(&after);
}

static void prune(const ota_plan *p, const char *keep, const char *old)
{
    char releases[OTA_PATH], dir[OTA_PATH];
    ota_path(releases, OTA_PATH, "%s/releases", p->base);
    DIR *d = opendir(releases);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!ota_is_rid(e->d_name) || !strcmp(e->d_name, keep) || !strcmp(e->d_name, old))
            continue;
        ota_path(dir, OTA_PATH, "%s/%s", releases, e->d_name);
        if (ota_is_dir(dir))
            ota_rm_rf(dir);
    }
    closedir(d);
}

void ota_install(const char *payload)
{
    ota_plan p;
    ota_load_plan(payload, &p);
    ota_check_reserved(&p);
    char releases[OTA_PATH], staging[OTA_PATH], dst[OTA_PATH], rj[OTA_PATH], path[OTA_PATH];
    ota_path(releases, OTA_PATH, "%s/releases", p.base);
    ota_mkdir_p(releases, 0755);
    ota_mkdir_p(p.ota, 0755);
    ota_no_link(releases);
    ota_no_link(p.ota);
    ota_own_tree(p.base, "install"); /* again: what mkdir -p found there already is not taken on trust */
    settle(&p);
    ota_state s = {0};
    int have_state = ota_state_read(&p, &s);
    char old[17] = "", rid[17];
    if (have_state)
        strcpy(old, s.current);
    ota_path(staging, OTA_PATH, "%s/.incoming-ota", releases);
    ota_path(path, OTA_PATH, "%s.files", staging);
    ota_rm_rf(staging);
    ota_rm_rf(path);
    if (mkdir(staging, 0700) != 0)
        ota_die("cannot create %s", staging);
    ota_stage(&p, &s, have_state, staging, rid);
    ota_path(dst, OTA_PATH, "%s/%s", releases, rid);
    ota_no_link(dst);
    if (!strcmp(old, rid) && ota_is_dir(dst)) {
        ota_rm_rf(staging);
        ota_say("release %s is already current", rid); /* nothing to roll back */
        ota_regions(&p, "load", dst, p.allow_unreserved); /* unless this boot loaded them */
        return;
    }
    /* verified before any mode changes: what root chmods is what release.json lists, its bytes */
    if (ota_verify_release(staging, 0) != 0) {
        ota_rm_rf(staging);
        ota_die("verify failed on the board; the current release is unchanged");
    }
    ota_set_modes(&p, staging);
    ota_sync();
    int created = 0;
    ota_path(rj, OTA_PATH, "%s/release.json", dst);
    ota_path(path, OTA_PATH, "%s/release.json", staging);
    size_t a_len, b_len;
    char *a = ota_read(path, OTA_MAX_RECORD, &a_len), *b = NULL;
    ota_meta m;
    int kept = ota_is_dir(dst) && ota_lmeta(rj, &m) && S_ISREG(m.mode) && (b = ota_read(rj, OTA_MAX_RECORD, &b_len)) &&
               a_len == b_len && !memcmp(a, b, a_len) && ota_verify_release(dst, 1) == 0 && ota_modes_set(dst);
    free(a);
    free(b);
    if (kept) {
        ota_rm_rf(staging); /* kept from before, the same release.json, it verifies, its modes: used as it is */
    } else {
        if (ota_is_dir(dst)) { /* what a cut left of a prune, or a damaged copy: never the current one here */
            ota_say("releases/%s on the board does not verify (a cut rm -rf, or damage) or lacks the release's "
                    "modes: replaced", rid);
            if (ota_rm_rf(dst) != 0)
                ota_die("cannot remove %s", dst);
        }
        if (rename(staging, dst) != 0)
            ota_die("cannot move the staged release into place");
        created = 1;
    }
    ota_sync();
    /* what a rollback needs: the old state and current release, and whether ours is new */
    ota_path(path, OTA_PATH, "%s/state.old", p.ota);
    ota_rm_f(path);
    if (have_state)
        ota_put_copy(path, p.state);
    put_line(&p, "old", old);
    put_line(&p, "created", created ? "1" : "0");
    put_line(&p, "new", rid);
    /* the state after the switch, recorded before it: a cut between the two is settled from it */
    size_t len;
    char *body = state_body(&p, &s, rid, old, p.image, &len);
    ota_path(path, OTA_PATH, "%s/state.new", p.ota);
    ota_put(path, body, len);
    switch_current(&p, rid);
    ota_put(p.state, body, len);
    free(body);
    prune(&p, rid, old); /* older releases go (only ours: release ids under releases/) */
    ota_regions(&p, "load", dst, p.allow_unreserved); /* a failure fails the update: the engine rolls back */
    ota_say("installed release %s", rid);
    ota_state_free(&s);
}

void ota_rollback(const char *payload)
{
    ota_plan p;
    ota_load_plan(payload, &p);
    char path[OTA_PATH], so[OTA_PATH], old[17], new[17], created[17];
    ota_path(path, OTA_PATH, "%s/new", p.ota);
    ota_no_link(path);
    if (!ota_is_file(path)) {
        ota_say("nothing to roll back");
        return;
    }
    ota_get(&p, "old", 'e', old);
    ota_get(&p, "new", 'r', new);
    ota_get(&p, "created", 'f', created);
    /* the state before the update, root's record of it, whose current release was OLD: checked
     * before anything is changed */
    ota_path(so, OTA_PATH, "%s/state.old", p.ota);
    ota_state before = {0};
    int had = state_ok(so, &before);
    if (had && strcmp(before.current, old))
        ota_die("%s: its current is not the release this update replaced (%s): not what q25-ota wrote there; "
                "nothing was rolled back", so, *old ? old : "none");
    ota_path(path, OTA_PATH, "%s/releases/%s", p.base, old);
    if (*old && ota_is_dir(path)) {
        switch_current(&p, old);
    } else {
        ota_path(path, OTA_PATH, "%s/current", p.base);
        ota_rm_f(path);
    }
    if (had) {
        ota_put_copy(p.state, so);
        ota_rm_f(so);
    } else {
        ota_rm_f(p.state);
    }
    if (!strcmp(created, "1") && strcmp(new, old)) { /* only a release this update created goes */
        ota_path(path, OTA_PATH, "%s/releases/%s", p.base, new);
        ota_rm_rf(path);
    }
    for (const char *const *n = (const char *const[]){"old", "new", "created", NULL}; *n; n++) {
        ota_path(path, OTA_PATH, "%s/%s", p.ota, *n);
        ota_rm_f(path);
    }
    ota_sync();
    ota_say("rolled back to %s", *old ? old : "nothing");
    /* its partitions back into the regions; a device tree that does not reserve them is a warning
     * (the old release was not resident before this update either) */
    ota_path(path, OTA_PATH, "%s/releases/%s", p.base, old);
    if (*old && ota_is_dir(path))
        ota_regions(&p, "load", path, 1);
    ota_state_free(&before);
}

void ota_cleanup(const char *payload)
{
    ota_plan p;
    ota_load_plan(payload, &p);
    char path[OTA_PATH];
    ota_rm_rf(p.ota);
    ota_path(path, OTA_PATH, "%s/releases/.incoming-ota", p.base);
    ota_rm_rf(path);
}
