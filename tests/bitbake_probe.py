"""Run by tests/yocto.py inside a BitBake build directory, as the build's (non-root) user,
with the series' own python3 and bitbake/lib: one tinfoil session (the parse cache of the
preceding ``bitbake -p``) answers what ``bitbake -e RECIPE`` would, for several recipes and
for meta-xilinx's device-tree recipe (or another recipe file: "device_tree" with "vars")
under extra MACHINE overrides.

    python3 bitbake_probe.py BITBAKE_LIB REQUEST.json ANSWER.json

REQUEST: {"recipes": [PN, ...], "vars": [NAME, ...],
          "device_tree": null | {"recipe": PATH, "file": "q25-reserved-memory.dtsi",
                                 "strip": [OVERRIDE, ...],  # from the build's MACHINEOVERRIDES
                                 "cases": {NAME: [OVERRIDE, ...], ...},
                                 "vars": [NAME, ...]}}  # optional: any recipe's variables
ANSWER:  {"recipes": {PN: {"file": PATH, "vars": {NAME: VALUE}, "files": [[PKG, FILES], ...],
                           "src": [[URL, LOCALPATH or null], ...], "install": [DEST, ...]}},
          "device_tree": {"appends": [...], "cases": {NAME: {"EXTRA_DT_INCLUDE_FILES": ..., "EXTRA_OVERLAYS": ...,
                                                            "SRC_URI": ..., "local": PATH,
                                                            "vars": {NAME: VALUE}}}}}
"""

import json
import re
import sys


def local_paths(d, uris):
    import bb.fetch2

    out = []
    for url in uris:
        try:
            path = bb.fetch2.Fetch([url], d).localpath(url)
        except Exception as e:  # noqa: BLE001 - reported to the test as a missing file
            path = None
            sys.stderr.write(f"{url}: {e}\n")
        out.append([url, path])
    return out


def install_destinations(d):
    """Files do_install puts into ${D} with `install -m MODE SRC DEST` (absolute, under /)."""
    body = d.getVar("do_install") or ""
    dest_root = d.getVar("D")
    out = []
    for line in body.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0] == "install" and words[1] == "-m" and words[-1].startswith(dest_root):
            out.append(words[-1][len(dest_root) :])
    return out


def recipe(tf, pn, names):
    d = tf.parse_recipe(pn)
    packages = (d.getVar("PACKAGES") or "").split()
    return {
        "file": d.getVar("FILE"),
        "vars": {n: d.getVar(n) for n in names},
        "files": [[p, d.getVar(f"FILES:{p}") or ""] for p in packages],  # in PACKAGES order
        "src": local_paths(d, (d.getVar("SRC_URI") or "").split()),
        "install": install_destinations(d),
    }


def device_tree(tf, req):
    import bb.data

    fn = req["recipe"]
    appends = list(tf.get_file_appends(fn))
    cases = {}
    for name, overrides in req["cases"].items():
        config = bb.data.createCopy(tf.config_data)
        kept = [o for o in config.getVar("MACHINEOVERRIDES").split(":") if o and o not in req["strip"]]
        config.setVar("MACHINEOVERRIDES", ":".join([*overrides, *kept]))
        # the same recipe under other overrides: other task hashes than the cooker's parse, on purpose
        config.setVar("BB_HASH_IGNORE_MISMATCH", "1")
        d = tf.parse_recipe_file(fn, appends=True, config_data=config)
        src = (d.getVar("SRC_URI") or "").split()
        url = next((u for u in src if re.fullmatch(r"file://" + re.escape(req["file"]) + r"(;.*)?", u)), None)
        cases[name] = {
            "EXTRA_DT_INCLUDE_FILES": d.getVar("EXTRA_DT_INCLUDE_FILES") or "",
            "EXTRA_OVERLAYS": d.getVar("EXTRA_OVERLAYS") or "",  # meta-xilinx rel-v2024.1's name
            "SRC_URI": d.getVar("SRC_URI") or "",
            "local": local_paths(d, [url])[0][1] if url else None,
            "vars": {n: d.getVar(n) for n in req.get("vars", [])},
        }
    return {"appends": appends, "cases": cases}


def main():
    sys.path.insert(0, sys.argv[1])
    import bb.tinfoil

    with open(sys.argv[2]) as f:
        req = json.load(f)
    answer = {"recipes": {}, "device_tree": None}
    with bb.tinfoil.Tinfoil() as tf:
        # not quiet: BitBake's parse summary (N cached, M parsed) goes into the run's timings
        tf.prepare(config_only=False, quiet=0)
        for pn in req["recipes"]:
            answer["recipes"][pn] = recipe(tf, pn, req["vars"])
        if req.get("device_tree"):
            answer["device_tree"] = device_tree(tf, req["device_tree"])
    with open(sys.argv[3], "w") as f:
        json.dump(answer, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
