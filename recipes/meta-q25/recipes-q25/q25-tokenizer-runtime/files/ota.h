/*
 * q25tok ota: the release steps root runs on the board for Mender and SWUpdate (docs/ota.md).
 * q25-ota.sh, the engines' entry, only maps their states onto `q25tok ota STEP DIR`.
 *
 * Modules: ota_fs.c (one owner per tree: who owns what, reading root's records, writing a
 * file through a temporary, placing, removing), ota_json.c (release.json and the board's
 * state file, read strictly and written byte for byte as q25deploy writes them), ota_plan.c
 * (the payload's q25-plan), ota_stage.c (a release staged and verified), ota_steps.c (install,
 * rollback, cleanup), ota_smoke.c (the smoke test and the regions), cli_ota.c (the command).
 *
 * A failing step prints one line "q25-ota: WHY" on stderr and exits 1 (ota_die): every step
 * is a process of its own, as it was in sh, and what it leaves is what the engines' rollback
 * and the next install settle. Progress goes to ota_say's descriptor (stderr for Mender,
 * stdout for SWUpdate: cli_ota.c).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef OTA_H
#define OTA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define OTA_PATH 4096       /* any path this command builds */
#define OTA_REL 1024        /* a release path (relative) */
#define OTA_MAX_FILES 65536 /* files in one release */
#define OTA_MAX_RECORD ((uint64_t)16 << 20) /* release.json, the state file, a plan */

/* -- messages (cli_ota.c) ------------------------------------------------------------------ */
extern int ota_say_fd;  /* progress: 2 (Mender) or 1 (SWUpdate) */
__attribute__((noreturn, format(printf, 1, 2))) void ota_die(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void ota_say(const char *fmt, ...);

/* -- who runs this (cli_ota.c sets them) --------------------------------------------------- */
extern uid_t ota_me;
extern char ota_who[32]; /* "root" or "uid N" */
extern char ota_own[48]; /* "root:root" or "N:G": what a fix's chown names */

/* -- plain names (ota_plan.c) -------------------------------------------------------------- */
int ota_is_rid(const char *s);     /* 16 lower-case hex digits */
int ota_is_hex(const char *s, size_t n); /* exactly n lower-case hex digits */
int ota_is_name(const char *s);    /* [A-Za-z0-9][A-Za-z0-9._+-]*, at most 128 */
int ota_is_rel(const char *s);     /* parts [A-Za-z0-9_][A-Za-z0-9._+-]*, '/' between */
int ota_is_digits(const char *s);  /* [0-9]+ */

/* -- the file system (ota_fs.c) ------------------------------------------------------------ */
typedef struct ota_meta {
    mode_t mode;
    nlink_t nlink;
    uid_t uid;
    off_t size;
} ota_meta;
int ota_lmeta(const char *path, ota_meta *m); /* lstat: 1 there (m filled), 0 absent; dies on other errors */
void ota_mode_string(mode_t mode, char out[11]); /* as ls -l: drwxr-xr-x, -rw-r--r--, lrwxrwxrwx, prw-r--r-- */
void ota_no_link(const char *path);              /* a symlink there: die */
void ota_no_fifo(const char *path);              /* something there that is no regular file: die */
void ota_no_link_in(const char *dir, const char *rel); /* no part of REL under DIR is a symlink */
/* TREE (KIND "install" or "payload"), everything in it and every directory above it (as named
 * and as resolved) is this user's alone: the first check of every step (q25-ota.sh's own_tree) */
void ota_own_tree(const char *tree, const char *kind);
void ota_own_record(const char *file);  /* absent, or a regular file of ours with one name, not group/other-writable */
void ota_own_file(const char *file, const char *mode_str); /* ours, exactly that ls mode, any number of names */
/* the whole of a regular file (O_NOFOLLOW|O_NONBLOCK, fstat): malloc'd, NUL-terminated, *len
 * bytes; NULL when absent; anything else (a link, a FIFO, too large, unreadable): die */
char *ota_read(const char *path, uint64_t max, size_t *len);
/* FILE := DATA, through a fresh temporary beside it (O_EXCL, mode 0644), fsync'd before the
 * rename and the directory after it; never through a link, never onto a directory */
void ota_put(const char *file, const void *data, size_t len);
void ota_put_copy(const char *file, const char *src); /* FILE := the bytes of SRC (ota_read's checks) */
/* SRC -> DST (DST must not exist): a hard link when SRC has one name and both are on one file
 * system, else a copy into a new file */
void ota_place(const char *src, const char *dst);
void ota_copy_new(const char *src, const char *dst);  /* a copy into a new file DST */
void ota_mkdir_p(const char *path, mode_t mode);       /* mkdir -p (no link followed on the way below the tree) */
int ota_rm_rf(const char *path);   /* rm -rf without following a link: 0, or -1 (errno) */
void ota_rm_f(const char *path);   /* unlink if there (not a directory); die on errors other than ENOENT */
void ota_sync(void);
/* RELEASE-DIR/REL's sha256 (a regular file, no link on the way): 0, 1 when not a regular file (said) */
int ota_sha256_file(const char *path, char hex[65]);

/* -- release.json and the state file (ota_json.c) ------------------------------------------ */
typedef struct ota_file {
    char sha256[65];
    uint64_t size;
    char path[OTA_REL];
} ota_file;
typedef struct ota_release {
    char id[17];
    ota_file *files; /* sorted by path, as q25deploy writes them */
    size_t nfiles;
    char model_sha256[65];      /* "" when null */
    char target[132];           /* "" when null */
    char vocab_fingerprint[65];
} ota_release;
/* release.json as q25deploy writes it (json_bytes: indent 2, sorted keys): 0, or -1 with why */
int ota_release_parse(const char *text, size_t len, ota_release *r, char *why, size_t whylen);
/* release.json's text for r (its files sorted by path here), its id computed (into r->id) as
 * q25deploy does: the first 16 hex digits of the sha256 of its compact JSON without "id" */
char *ota_release_render(ota_release *r, size_t *len);
void ota_release_free(ota_release *r);

typedef struct ota_state_rec {
    char id[17];
    char deployed_at[40]; /* "" when absent */
    char image[OTA_REL];  /* "" when absent or null */
    char vocab_fingerprint[65];
} ota_state_rec;
typedef struct ota_state {
    char current[17];  /* "" when null */
    char previous[17]; /* "" when null */
    ota_state_rec *recs;
    size_t nrecs;
} ota_state;
/* a board state exactly as q25deploy writes it (schema.parse_state's values; q25-ota.sh's
 * state_valid): 0, or -1 */
int ota_state_parse(const char *text, size_t len, ota_state *s);
const ota_state_rec *ota_state_find(const ota_state *s, const char *id);
void ota_state_free(ota_state *s);
/* the state after a switch to NEW (release.json of it: nr, deployed NOW with IMAGE) from PREV
 * ("" for none: its release.json pr, its deployed_at and image as the old state had them,
 * prev_at "" -> NOW, prev_image "" -> tokenizer.q25tokrt) */
char *ota_state_render(const ota_release *nr, const char *now, const char *image, const ota_release *pr,
                       const char *prev_at, const char *prev_image, size_t *len);

/* -- the payload's plan, q25-plan (ota_plan.c; written by q25deploy/ota/plan.py) ------------ */
typedef struct ota_plan_file {
    char sha256[65];
    uint64_t size;
    char name[132]; /* flat name in the payload */
    char rel[OTA_REL]; /* path in the release */
} ota_plan_file;
typedef struct ota_smoke_line {
    char name[132];
    int special;
    char *ids; /* "1,2,3" */
} ota_smoke_line;
typedef struct ota_region_line {
    char node[132];
    char base[17], size[17]; /* 16 hex digits each */
} ota_region_line;
typedef struct ota_plan {
    char dir[OTA_PATH];      /* the payload directory */
    char path[OTA_PATH];     /* DIR/q25-plan */
    int full;                /* mode full (1) or tokenizer (0) */
    char release[17], fingerprint[65];
    char install[OTA_PATH];  /* as the plan names it */
    char q25tok[OTA_PATH], image[OTA_REL], dt[OTA_PATH], mem[OTA_PATH];
    int allow_unreserved;
    char forward[132];       /* "" when none */
    ota_plan_file *files;
    size_t nfiles;
    ota_smoke_line *smokes;
    size_t nsmokes;
    ota_region_line *regions;
    size_t nregions;
    /* under the root prefix */
    char q25tok_live[OTA_PATH], dt_live[OTA_PATH], mem_live[OTA_PATH];
    char base[OTA_PATH], ota[OTA_PATH], state[OTA_PATH], loaded[OTA_PATH];
} ota_plan;
extern const char *ota_root; /* Q25_ROOT: prefixes every board path ("" on a board) */
/* DIR's plan, every value checked, the payload and the install dir checked as trees of ours */
void ota_load_plan(const char *dir, ota_plan *p);
/* DIR/NAME, a regular file of the payload (no link), or die "...: missing from the payload" */
void ota_payload(const ota_plan *p, const char *name, char out[OTA_PATH]);
int ota_plan_has_rel(const ota_plan *p, const char *rel);
/* snprintf into OUT or die (a path too long) */
__attribute__((format(printf, 3, 4))) void ota_path(char *out, size_t n, const char *fmt, ...);

/* -- the steps (ota_steps.c, ota_smoke.c) --------------------------------------------------- */
void ota_install(const char *dir);
void ota_smoke(const char *dir);
void ota_rollback(const char *dir);
void ota_cleanup(const char *dir);
/* staging (ota_stage.c) */
const char *ota_mode_of(const char *rel); /* the ls mode a release file has: q25tok -rwxr-xr-x, else -rw-r--r-- */
int ota_is_dir(const char *path);         /* lstat: a directory (not a link to one) */
int ota_is_file(const char *path);        /* lstat: a regular file */
/* STAGING := the plan's release (full), or the current one with the plan's files (tokenizer-only);
 * RID := its id */
void ota_stage(const ota_plan *p, const ota_state *s, int have_state, const char *staging, char rid[17]);
void ota_set_modes(const ota_plan *p, const char *dir); /* the release's modes, on what root placed */
int ota_modes_set(const char *dir);                     /* DIR has them and is ours (a kept release) */
/* shared by the steps */
void ota_read_release(const char *file, ota_release *r); /* root's record (own_record), parsed, or die */
int ota_state_read(const ota_plan *p, ota_state *s); /* the state file: 1 read, 0 absent; die when not ours or malformed */
void ota_current(const ota_plan *p, char rid[17]); /* the release current points at, or die */
int ota_verify_release(const char *dir, int quiet); /* every file release.json lists is a regular file of its sha256: 0, or 1 (said unless quiet) */
void ota_regions(const ota_plan *p, const char *what, const char *release_dir, int allow_unreserved);
void ota_check_reserved(const ota_plan *p);
void ota_pick_q25tok(const ota_plan *p);

#endif
