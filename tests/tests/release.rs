//! `scripts/release`, run whole with the debug profile (`RELEASE_PROFILE=dev`: the same steps as
//! a release, on the build the test suite already made) into a temporary folder: the checksums
//! verify with `sha256sum -c` (and fail on a changed file), the SBOM is CycloneDX JSON listing
//! what the binaries link with version, license and Cargo.lock's checksum, the binaries carry no
//! symbol table or debug information, and `--push REGISTRY` without a Docker engine prints the
//! image commands (every target a stage of the Dockerfile) instead of failing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const BINARIES: [&str; 3] = [
    "switchyard-control-plane",
    "switchyard-data-plane",
    "switchyard-mock-upstream",
];

/// The names of an ELF64 little-endian file's sections.
fn elf_sections(path: &Path) -> Vec<String> {
    let data = std::fs::read(path).unwrap();
    assert_eq!(&data[..4], b"\x7fELF", "{} is not ELF", path.display());
    assert_eq!(data[4], 2, "{} is not a 64-bit ELF", path.display());
    let u16_at = |at: usize| u16::from_le_bytes(data[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().unwrap()) as usize;
    let (table, entry, count, names_index) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| table + i * entry;
    let names = u64_at(header(names_index) + 0x18);
    (0..count)
        .map(|i| {
            let start = names + u32_at(header(i));
            let end = start + data[start..].iter().position(|&b| b == 0).unwrap();
            String::from_utf8_lossy(&data[start..end]).into_owned()
        })
        .collect()
}

fn dockerfile_stages() -> Vec<String> {
    std::fs::read_to_string(format!("{ROOT}/Dockerfile"))
        .unwrap()
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["FROM", _, as_, stage] if as_.eq_ignore_ascii_case("as") => {
                    Some(stage.to_string())
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
fn the_release_script_makes_verified_stripped_binaries_an_sbom_and_the_image_commands() {
    let work = std::env::temp_dir().join(format!("switchyard-release-{}", std::process::id()));
    let out = work.join("dist");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let mut release = Command::new("bash");
    // The variables cargo gives a test describe this crate; a build script that tracks one of
    // them (ring's) would be rebuilt for it. The script's cargo sees the developer's environment.
    for (name, _) in std::env::vars() {
        if (name.starts_with("CARGO_") && name != "CARGO_HOME" && name != "CARGO_TARGET_DIR")
            || name == "OUT_DIR"
        {
            release.env_remove(name);
        }
    }
    let run = release
        .arg(format!("{ROOT}/scripts/release"))
        .args(["--out", out.to_str().unwrap(), "--push", "registry.test"])
        .env("RELEASE_PROFILE", "dev")
        // Never a real engine, even on a machine that has one: the script must print, not push.
        .env(
            "DOCKER_HOST",
            format!("unix://{}/no-docker.sock", work.display()),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "scripts/release failed ({}):\n{stderr}\n{stdout}",
        run.status
    );

    let verify = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(&out)
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    for name in BINARIES {
        assert!(
            sums.contains(&format!("  {name}\n")),
            "{name} not in SHA256SUMS:\n{sums}"
        );
        let sections = elf_sections(&out.join(name));
        assert!(
            sections.iter().any(|s| s == ".text"),
            "{name}: {sections:?}"
        );
        // `.debug_gdb_scripts` is loaded with the program (a pointer to rustc's pretty-printers),
        // not debug information: strip keeps it.
        let kept: Vec<&String> = sections
            .iter()
            .filter(|s| *s == ".symtab" || (s.starts_with(".debug") && *s != ".debug_gdb_scripts"))
            .collect();
        assert!(kept.is_empty(), "{name} is not stripped: {kept:?}");
    }

    let sbom_name = sums
        .lines()
        .filter_map(|line| line.split_once("  ").map(|(_, name)| name))
        .find(|name| name.ends_with(".cdx.json"))
        .expect("the SBOM is in SHA256SUMS");
    let sbom: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(sbom_name)).unwrap()).unwrap();
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    let components = sbom["components"].as_array().unwrap();
    let find = |name: &str| {
        components
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in the SBOM"))
    };
    let tokio = find("tokio");
    assert_eq!(tokio["hashes"][0]["alg"], "SHA-256");
    assert_eq!(tokio["hashes"][0]["content"].as_str().unwrap().len(), 64);
    assert_eq!(tokio["licenses"][0]["expression"], "MIT");
    assert!(tokio["purl"]
        .as_str()
        .unwrap()
        .starts_with("pkg:cargo/tokio@"));
    assert_eq!(find("switchyard-data-plane")["type"], "application");
    assert!(components
        .iter()
        .all(|c| c["licenses"].as_array().is_some_and(|l| !l.is_empty())));
    // Dev-dependencies are not linked, so not listed (the benchmarks' and property tests').
    assert!(components
        .iter()
        .all(|c| c["name"] != "criterion" && c["name"] != "proptest"));

    // No engine: the commands are printed, one build per image, each target a Dockerfile stage.
    assert!(stderr.contains("no Docker engine"), "{stderr}");
    let stages = dockerfile_stages();
    for image in ["control-plane", "data-plane", "mock-upstream"] {
        assert!(
            stages.iter().any(|s| s == image),
            "no stage {image} in {stages:?}"
        );
        assert!(
            stdout.contains(&format!("docker build --target {image} "))
                && stdout.contains(&format!("-t registry.test/switchyard/{image}:"))
                && stdout.contains(&format!("docker push registry.test/switchyard/{image}:")),
            "{stdout}"
        );
    }

    // The checksums cover what they list: a changed SBOM fails the check.
    std::fs::write(out.join(sbom_name), b"{}\n").unwrap();
    let tampered = Command::new("sha256sum")
        .args(["-c", "--quiet", "SHA256SUMS"])
        .current_dir(&out)
        .output()
        .unwrap();
    assert!(
        !tampered.status.success(),
        "sha256sum -c accepted a changed SBOM"
    );
    std::fs::remove_dir_all(&work).unwrap();
}
