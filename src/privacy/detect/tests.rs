use super::*;

fn detector(kinds: &[PersonalData], region: &str, names: &[&str]) -> Detector {
    Detector::new(&PrivacyConfig {
        pseudonymize: kinds.to_vec(),
        names: names.iter().map(|n| n.to_string()).collect(),
        phone_region: region.into(),
    })
}

fn all() -> Detector {
    use PersonalData::*;
    detector(&[Email, Phone, Iban, Card, Ip, Name], "", &["Ada Lovelace"])
}

fn found(d: &Detector, text: &str) -> Vec<(PersonalData, String, String)> {
    d.find(text, &[])
        .into_iter()
        .map(|f| (f.kind, text[f.start..f.end].to_string(), f.key))
        .collect()
}

#[test]
fn each_kind_is_found_with_its_normal_form() {
    let text = "Mail ada@Example.com or call +1 650-253-0000. IBAN DE89 3704 0044 0532 0130 00, \
                card 4111 1111 1111 1111, host 192.168.1.20 and 2001:db8::1. Ada Lovelace agreed.";
    let got = found(&all(), text);
    use PersonalData::*;
    assert_eq!(
        got,
        vec![
            (Email, "ada@Example.com".into(), "ada@example.com".into()),
            (Phone, "+1 650-253-0000".into(), "+16502530000".into()),
            (
                Iban,
                "DE89 3704 0044 0532 0130 00".into(),
                "DE89370400440532013000".into()
            ),
            (
                Card,
                "4111 1111 1111 1111".into(),
                "4111111111111111".into()
            ),
            (Ip, "192.168.1.20".into(), "192.168.1.20".into()),
            (Ip, "2001:db8::1".into(), "2001:db8::1".into()),
            (Name, "Ada Lovelace".into(), "Ada Lovelace".into()),
        ]
    );
}

#[test]
fn checksums_and_shapes_keep_lookalikes_out() {
    let d = all();
    for text in [
        "IBAN DE89 3704 0044 0532 0130 02 has a wrong check digit",
        "card 4111 1111 1111 1112 fails Luhn",
        "on 2026-11-27 at 12:30:45, version 1.2.3, 999.1.1.1",
        "a handle @ada and user@localhost",
        "order 12345",
        "Ada Lovelaces and Ada were here",
    ] {
        assert_eq!(found(&d, text), vec![], "{text}");
    }
}

#[test]
fn national_phone_numbers_need_the_region() {
    let text = "Ruf an: 030 901820 oder +49 30 901820";
    let none = detector(&[PersonalData::Phone], "", &[]);
    let keys: Vec<String> = found(&none, text).into_iter().map(|f| f.2).collect();
    assert_eq!(keys, vec!["+4930901820".to_string()]);
    let de = detector(&[PersonalData::Phone], "DE", &[]);
    let keys: Vec<String> = found(&de, text).into_iter().map(|f| f.2).collect();
    assert_eq!(
        keys,
        vec!["+4930901820".to_string(), "+4930901820".to_string()]
    );
}

#[test]
fn switched_off_kinds_are_left_alone() {
    let d = detector(&[PersonalData::Iban], "", &[]);
    assert_eq!(found(&d, "ada@example.com, 4111111111111111"), vec![]);
    assert_eq!(found(&d, "GB82WEST12345698765432").len(), 1);
}

#[test]
fn odd_input_never_panics() {
    let d = all();
    for text in [
        "",
        "@",
        "[",
        "+",
        "(((",
        "DE89",
        "é@é.é",
        "1.2.3.4.",
        "::",
        "+49 ",
        "ü1234567890123",
    ] {
        let _ = d.find(text, &[]);
    }
    let long = format!("{}@{}", "9".repeat(10_000), "x.".repeat(1000));
    let _ = d.find(&long, &[]);
}
