from __future__ import annotations

import json
import subprocess

from requirements import need_program

from q25deploy.cli import main


def test_header_compiles_and_holds_every_address(tmp_path, qwen25_tiny):
    cc = need_program("cc", "Debian: gcc")
    out = tmp_path / "b"
    assert main(["build", "--target", "qemu", "--model", str(qwen25_tiny), "--out", str(out)]) == 0
    pmap = json.loads((out / "partition_map.json").read_text())
    (tmp_path / "t.c").write_text(
        '#include <stdio.h>\n#include "q25_memory_map.h"\n'
        "int main(void) {\n"
        '    printf("%u %u 0x%llx\\n", Q25_REGION_COUNT, Q25_TENSOR_COUNT, (unsigned long long)Q25_REGION0_BASE);\n'
        "    for (unsigned i = 0; i < Q25_TENSOR_COUNT; i++)\n"
        '        printf("%s %llu %llu %u %u %llu\\n", q25_tensors[i].name, (unsigned long long)q25_tensors[i].addr,\n'
        "               (unsigned long long)q25_tensors[i].bytes, q25_tensors[i].region, q25_tensors[i].ggml_type,\n"
        "               (unsigned long long)q25_tensors[i].shape[0]);\n"
        '    printf("%llu\\n", (unsigned long long)Q25_T_TOKEN_EMBD_WEIGHT_ADDR);\n'
        "    return 0;\n}\n"
    )
    (tmp_path / "unused.c").write_text('#include "q25_memory_map.h"\nint unused(void) { return 0; }\n')
    for src in ("t.c", "unused.c"):  # a unit that does not use the table compiles cleanly too
        subprocess.run(
            [
                cc,
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-I",
                str(out),
                "-c",
                str(tmp_path / src),
                "-o",
                str(tmp_path / (src + ".o")),
            ],
            check=True,
        )
    subprocess.run([cc, str(tmp_path / "t.c.o"), "-o", str(tmp_path / "t")], check=True)
    lines = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, check=True).stdout.splitlines()
    count, n, base = lines[0].split()
    assert int(count) == len(pmap["regions"]) and int(n) == len(pmap["tensors"])
    assert int(base, 16) == pmap["regions"][0]["base"]
    from gguf import GGMLQuantizationType

    for line, t in zip(lines[1:], pmap["tensors"]):
        name, addr, nbytes, region, qtype, ne0 = line.split()
        assert (name, int(addr), int(nbytes), int(region), int(qtype), int(ne0)) == (
            t["name"],
            t["address"],
            t["bytes"],
            t["region"],
            GGMLQuantizationType[t["type"]].value,
            t["shape"][0],
        )
    emb = next(t for t in pmap["tensors"] if t["name"] == "token_embd.weight")
    assert int(lines[-1]) == emb["address"]
