//! The server's framing verdict on request heads built from the framing headers in every order,
//! with their names and values in every case and given once or twice, against two expectations
//! written independently of the server's code: a hand-written rule for the combinations that
//! matter most (both framings present: refused, whatever the order or case), and the reference
//! reading of RFC 9112 the differential fuzz target `http1_framing` uses (`fuzz/src/`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../../fuzz/src/framing_reference.rs"]
mod framing_reference;

use switchyard_server::{framing_verdict, FramingVerdict};

/// Every order of `items` (Heap's algorithm).
fn permutations<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
    fn heap<T: Clone>(k: usize, items: &mut Vec<T>, out: &mut Vec<Vec<T>>) {
        if k <= 1 {
            out.push(items.clone());
            return;
        }
        for i in 0..k {
            heap(k - 1, items, out);
            let j = if k.is_multiple_of(2) { i } else { 0 };
            items.swap(j, k - 1);
        }
    }
    let mut out = Vec::new();
    heap(items.len(), &mut items.to_vec(), &mut out);
    out
}

/// A name in lower, Title, UPPER and aLtErNaTiNg case.
fn cases_of(name: &str) -> [String; 4] {
    let title = name
        .split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("-");
    let alternating = name
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c
            } else {
                c.to_ascii_uppercase()
            }
        })
        .collect();
    [
        name.to_owned(),
        title,
        name.to_ascii_uppercase(),
        alternating,
    ]
}

fn head(version: &str, lines: &[String]) -> Vec<u8> {
    let mut text = format!("POST /echo HTTP/{version}\r\n");
    for line in lines {
        text.push_str(line);
        text.push_str("\r\n");
    }
    text.push_str("\r\n");
    text.into_bytes()
}

#[test]
fn both_framings_are_refused_in_every_order_and_case() {
    let mut checked = 0;
    for te_name in cases_of("transfer-encoding") {
        for te_value in [
            "chunked",
            "Chunked",
            "CHUNKED",
            " chunked\t",
            "gzip, chunked",
        ] {
            for cl_name in cases_of("content-length") {
                for cl_value in ["0", "5", "00005"] {
                    let lines = [
                        "host: x".to_owned(),
                        format!("{te_name}: {te_value}"),
                        format!("{cl_name}: {cl_value}"),
                        "x-other: 1".to_owned(),
                    ];
                    for order in permutations(&lines) {
                        let bytes = head("1.1", &order);
                        // Hand-written: a request with both is refused (never read by its
                        // length, nor by its chunks).
                        assert_eq!(
                            framing_verdict(&bytes),
                            FramingVerdict::Refused(400),
                            "{:?}",
                            String::from_utf8_lossy(&bytes)
                        );
                        framing_reference::agrees(&bytes, framing_verdict(&bytes)).unwrap();
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 4 * 5 * 4 * 3 * 24);
}

#[test]
fn one_framing_alone_is_read_in_every_order_and_case_and_twice_is_refused() {
    for name in cases_of("transfer-encoding") {
        for value in ["chunked", "Chunked", "cHuNkEd", "\tchunked "] {
            for order in permutations(&[
                "host: x".to_owned(),
                format!("{name}: {value}"),
                "x-other: 1".to_owned(),
            ]) {
                let bytes = head("1.1", &order);
                assert_eq!(framing_verdict(&bytes), FramingVerdict::Chunked);
                framing_reference::agrees(&bytes, framing_verdict(&bytes)).unwrap();
                // On HTTP/1.0, no chunked body: refused.
                let old = head("1.0", &order);
                assert_eq!(framing_verdict(&old), FramingVerdict::Refused(400));
            }
            // Twice, equal or not, in either order and case: refused.
            for other in cases_of("transfer-encoding") {
                for second in ["chunked", "identity"] {
                    for order in permutations(&[
                        "host: x".to_owned(),
                        format!("{name}: {value}"),
                        format!("{other}: {second}"),
                    ]) {
                        let bytes = head("1.1", &order);
                        assert_eq!(framing_verdict(&bytes), FramingVerdict::Refused(400));
                        framing_reference::agrees(&bytes, framing_verdict(&bytes)).unwrap();
                    }
                }
            }
        }
        // A coding list, in any case, is refused.
        for value in [
            "gzip, chunked",
            "chunked, chunked",
            "identity, CHUNKED",
            "chunked,",
        ] {
            let bytes = head("1.1", &["host: x".to_owned(), format!("{name}: {value}")]);
            assert_eq!(framing_verdict(&bytes), FramingVerdict::Refused(400));
        }
    }
    for name in cases_of("content-length") {
        for order in permutations(&[
            "Host: x".to_owned(),
            format!("{name}: 0012"),
            "x-other: 1".to_owned(),
        ]) {
            let bytes = head("1.1", &order);
            assert_eq!(framing_verdict(&bytes), FramingVerdict::Length(12));
            framing_reference::agrees(&bytes, framing_verdict(&bytes)).unwrap();
        }
        // Twice, equal or different, the larger first or last, in any case: refused.
        for other in cases_of("content-length") {
            for (a, b) in [("5", "5"), ("5", "0"), ("0", "5")] {
                for order in permutations(&[
                    "host: x".to_owned(),
                    format!("{name}: {a}"),
                    format!("{other}: {b}"),
                ]) {
                    let bytes = head("1.1", &order);
                    assert_eq!(framing_verdict(&bytes), FramingVerdict::Refused(400));
                    framing_reference::agrees(&bytes, framing_verdict(&bytes)).unwrap();
                }
            }
        }
    }
}

#[test]
fn host_rules_hold_in_every_order_and_case() {
    for name in cases_of("host") {
        for other in cases_of("host") {
            for order in permutations(&[
                format!("{name}: a"),
                format!("{other}: b"),
                "content-length: 1".to_owned(),
            ]) {
                for version in ["1.1", "1.0"] {
                    let bytes = head(version, &order);
                    assert_eq!(framing_verdict(&bytes), FramingVerdict::Refused(400));
                    framing_reference::agrees(&bytes, framing_verdict(&bytes)).unwrap();
                }
            }
        }
    }
    let no_host = head("1.1", &["content-length: 1".to_owned()]);
    assert_eq!(framing_verdict(&no_host), FramingVerdict::Refused(400));
    let old = head("1.0", &["content-length: 1".to_owned()]);
    assert_eq!(framing_verdict(&old), FramingVerdict::Length(1));
}

#[test]
fn the_reference_agrees_on_the_seed_heads_of_the_fuzz_target() {
    // The fuzz target's seeds (fuzz/corpus/http1_framing/): each agrees here first.
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/http1_framing");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        framing_reference::agrees(&bytes, framing_verdict(&bytes)).unwrap();
        seen += 1;
    }
    assert!(seen >= 10, "only {seen} seeds in {}", dir.display());
}
