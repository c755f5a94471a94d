/*
 * A release staged from a payload (ota.h): the files placed (a hard link, else a copy), a
 * tokenizer-only release built from the current one the way `deploy --tokenizer-only` builds it
 * (its release.json and id computed here), every file verified against release.json, and the
 * release's modes: files 0644, q25tok 0755, directories 0755 (the engines write 0600 files).
 * Root chmods only what it placed itself: a payload file it linked or copied, the release.json
 * it wrote, the directories it made; a file linked from the current release must already have
 * its mode (ota_own_file).
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "ota.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *ota_mode_of(const char *rel)
{
    return strcmp(rel, "q25tok") == 0 ? "-rwxr-xr-x" : "-rw-r--r--";
}

int ota_is_dir(const char *path)
{
    ota_meta m;
    return ota_lmeta(path, &m) && S_ISDIR(m.mode);
}

int ota_is_file(const char *path)
{
    ota_meta m;
    return ota_lmeta(path, &m) && S_ISREG(m.mode);
}

void ota_read_release(const char *file, ota_release *r)
{
    ota_own_record(file);
    size_t len;
    char *text = ota_read(file, OTA_MAX_RECORD, &len);
    if (!text)
        ota_die("%s: missing", file);
    char why[200];
    if (ota_release_parse(text, len, r, why, sizeof why) != 0)
        ota_die("%s: %s", file, why);
    free(text);
}

int ota_verify_release(const char *dir, int quiet)
{
    char rj[OTA_PATH], path[OTA_PATH], got[65];
    ota_path(rj, OTA_PATH, "%s/release.json", dir);
    ota_release r;
    ota_read_release(rj, &r);
    int bad = 0;
    for (size_t i = 0; i < r.nfiles && !bad; i++) {
        ota_no_link_in(dir, r.files[i].path);
        ota_path(path, OTA_PATH, "%s/%s", dir, r.files[i].path);
        if (!ota_is_file(path)) {
            if (!quiet)
                fprintf(stderr, "q25-ota: %s: not a regular file\n", path);
            bad = 1;
        } else if (ota_sha256_file(path, got) != 0 || strcmp(got, r.files[i].sha256) != 0) {
            if (!quiet)
                fprintf(stderr, "q25-ota: %s: FAILED (its sha256 is not release.json's)\n", path);
            bad = 1;
        }
    }
    ota_release_free(&r);
    return bad;
}

/* the staging's directories, release.json and the files it lists get the release's modes */
void ota_set_modes(const ota_plan *p, const char *dir)
{
    char path[OTA_PATH];
    ota_path(path, OTA_PATH, "%s/release.json", dir);
    ota_no_link(dir);
    ota_no_link(path);
    if (chmod(dir, 0755) || chmod(path, 0644))
        ota_die("cannot set modes in %s", dir);
    ota_release r;
    ota_read_release(path, &r);
    for (size_t i = 0; i < r.nfiles; i++) {
        const char *rel = r.files[i].path;
        ota_no_link_in(dir, rel);
        ota_path(path, OTA_PATH, "%s/%s", dir, rel);
        if (ota_plan_has_rel(p, rel)) { /* placed: one name, or the payload's and ours */
            ota_meta m;
            if (!ota_lmeta(path, &m) || m.nlink > 2)
                ota_die("%s has %lu names: root changes no mode of a file another name may be anywhere", path,
                        (unsigned long)m.nlink);
            if (chmod(path, strcmp(rel, "q25tok") ? 0644 : 0755))
                ota_die("cannot set modes in %s", dir);
        } else {
            ota_own_file(path, ota_mode_of(rel)); /* linked from the current release: as it is */
        }
        for (char *slash = strrchr(path, '/'); slash && slash > path + strlen(dir); slash = strrchr(path, '/')) {
            *slash = 0;
            if (chmod(path, 0755))
                ota_die("cannot set modes in %s", dir);
        }
    }
    ota_release_free(&r);
}

/* PATH is ours with the ls mode WANT */
static int has_mode(const char *path, const char *want)
{
    ota_meta m;
    char ms[11];
    return ota_lmeta(path, &m) && m.uid == ota_me && (ota_mode_string(m.mode, ms), !strcmp(ms, want));
}

/* DIR has the release's modes, and its files are ours (a kept release: used as it is) */
int ota_modes_set(const char *dir)
{
    char path[OTA_PATH];
    ota_path(path, OTA_PATH, "%s/release.json", dir);
    if (!has_mode(dir, "drwxr-xr-x") || !has_mode(path, "-rw-r--r--"))
        return 0;
    ota_release r;
    ota_read_release(path, &r);
    int ok = 1;
    for (size_t i = 0; i < r.nfiles && ok; i++) {
        ota_path(path, OTA_PATH, "%s/%s", dir, r.files[i].path);
        ok = has_mode(path, ota_mode_of(r.files[i].path));
        for (char *slash = strrchr(path, '/'); ok && slash > path + strlen(dir); slash = strrchr(path, '/')) {
            *slash = 0;
            ok = has_mode(path, "drwxr-xr-x");
        }
    }
    ota_release_free(&r);
    return ok;
}

static void mkdir_for(const char *staging, const char *rel)
{
    char path[OTA_PATH];
    ota_path(path, OTA_PATH, "%s/%s", staging, rel);
    char *slash = strrchr(path, '/');
    *slash = 0;
    ota_mkdir_p(path, 0755);
}

static void stage_full(const ota_plan *p, const char *staging)
{
    char src[OTA_PATH], dst[OTA_PATH];
    for (size_t i = 0; i < p->nfiles; i++) {
        ota_payload(p, p->files[i].name, src);
        mkdir_for(staging, p->files[i].rel);
        ota_path(dst, OTA_PATH, "%s/%s", staging, p->files[i].rel);
        ota_place(src, dst);
    }
    ota_payload(p, "release.json", src);
    ota_path(dst, OTA_PATH, "%s/release.json", staging);
    ota_copy_new(src, dst); /* a record of one name: a copy */
    ota_release r;
    size_t len;
    char *text = ota_read(dst, OTA_MAX_RECORD, &len), why[200];
    if (!text || ota_release_parse(text, len, &r, why, sizeof why) != 0 || strcmp(r.id, p->release) != 0)
        ota_die("release.json does not describe %s", p->release);
    free(text);
    ota_release_free(&r);
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const ota_file *)a)->path, ((const ota_file *)b)->path);
}

/* a tokenizer-only release: the current one's files, the plan's replacing theirs; sets *rid
 * (computed like deploy --tokenizer-only) */
static void stage_tokenizer(const ota_plan *p, const ota_state *s, int have_state, const char *staging, char rid[17])
{
    char cur[OTA_PATH], rj[OTA_PATH], src[OTA_PATH], dst[OTA_PATH];
    const char *c = have_state ? s->current : "";
    ota_path(cur, OTA_PATH, "%s/releases/%s", p->base, c);
    ota_path(rj, OTA_PATH, "%s/release.json", cur);
    if (*c)
        ota_no_link(cur);
    if (!*c || !ota_is_file(rj))
        ota_die("nothing is deployed on this board yet: install a full release before a tokenizer-only one");
    const ota_state_rec *rec = ota_state_find(s, c);
    if (!rec || strcmp(rec->vocab_fingerprint, p->fingerprint) != 0)
        ota_die("refusing the tokenizer-only update: vocabulary fingerprint %s differs from the deployed model's %s",
                p->fingerprint, rec ? rec->vocab_fingerprint : "");
    ota_release old, nr;
    ota_read_release(rj, &old);
    nr = old;
    nr.files = calloc(old.nfiles + p->nfiles + 1, sizeof *nr.files);
    nr.nfiles = 0;
    if (!nr.files)
        ota_die("out of memory");
    for (size_t i = 0; i < old.nfiles; i++) {
        const char *rel = old.files[i].path;
        if (ota_plan_has_rel(p, rel))
            continue;
        ota_no_link_in(cur, rel);
        ota_path(src, OTA_PATH, "%s/%s", cur, rel);
        ota_own_file(src, ota_mode_of(rel)); /* linked as it is: never chmodded */
        mkdir_for(staging, rel);
        ota_path(dst, OTA_PATH, "%s/%s", staging, rel);
        if (link(src, dst) != 0)
            ota_die("cannot link the current release's files");
        nr.files[nr.nfiles++] = old.files[i];
    }
    for (size_t i = 0; i < p->nfiles; i++) {
        ota_payload(p, p->files[i].name, src);
        mkdir_for(staging, p->files[i].rel);
        ota_path(dst, OTA_PATH, "%s/%s", staging, p->files[i].rel);
        ota_place(src, dst);
        ota_file *f = &nr.files[nr.nfiles++];
        strcpy(f->sha256, p->files[i].sha256);
        f->size = p->files[i].size;
        strcpy(f->path, p->files[i].rel);
    }
    qsort(nr.files, nr.nfiles, sizeof *nr.files, by_path);
    strcpy(nr.vocab_fingerprint, p->fingerprint);
    size_t len;
    char *text = ota_release_render(&nr, &len);
    ota_path(dst, OTA_PATH, "%s/release.json", staging);
    ota_put(dst, text, len);
    strcpy(rid, nr.id);
    free(text);
    ota_release_free(&nr);
    ota_release_free(&old);
}

/* the state after a switch to NEW from OLD ("" none), NOW */
void ota_stage(const ota_plan *p, const ota_state *s, int have_state, const char *staging, char rid[17])
{
    strcpy(rid, p->release);
    if (p->full)
        stage_full(p, staging);
    else
        stage_tokenizer(p, s, have_state, staging, rid);
}
