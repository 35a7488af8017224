use std::sync::Arc;

use super::*;
use crate::config::PrivacyConfig;

fn privacy(table: Pseudonyms) -> Arc<ChatPrivacy> {
    let config = PrivacyConfig {
        pseudonymize: vec![PersonalData::Email, PersonalData::Iban, PersonalData::Phone],
        names: Vec::new(),
        phone_region: String::new(),
    };
    ChatPrivacy::new(Arc::new(Detector::new(&config)), table)
}

#[test]
fn a_value_keeps_its_placeholder_and_comes_back() {
    let p = privacy(Pseudonyms::default());
    let hidden = p.hide("Write to ada@example.com and bob@example.org, then ADA@example.com.");
    assert_eq!(hidden, "Write to [EMAIL_1] and [EMAIL_2], then [EMAIL_1].");
    // Another form of the same IBAN is the same value.
    let a = p.hide("IBAN DE89 3704 0044 0532 0130 00");
    let b = p.hide("DE89370400440532013000");
    assert_eq!((a.as_ref(), b.as_ref()), ("IBAN [IBAN_1]", "[IBAN_1]"));
    assert_eq!(
        p.reveal(
            "Sent to [EMAIL_2] from [IBAN_1]; [EMAIL_9] and [x] stay.",
            false
        ),
        "Sent to bob@example.org from DE89 3704 0044 0532 0130 00; [EMAIL_9] and [x] stay."
    );
}

#[test]
fn the_table_survives_its_bytes_and_numbers_go_on() {
    let p = privacy(Pseudonyms::default());
    p.hide("ada@example.com");
    let bytes = p.changed_table().expect("a value was added");
    let again = privacy(Pseudonyms::from_bytes(&bytes));
    assert!(again.changed_table().is_none(), "nothing new yet");
    assert_eq!(
        again.hide("bob@example.org, ada@example.com"),
        "[EMAIL_2], [EMAIL_1]"
    );
    assert!(Pseudonyms::from_bytes(b"not json").is_empty());
}

#[test]
fn json_arguments_get_escaped_values() {
    let mut table = Pseudonyms::default();
    let d = Detector::new(&PrivacyConfig {
        pseudonymize: vec![PersonalData::Name],
        names: vec!["O\"Hara".into()],
        phone_region: String::new(),
    });
    assert_eq!(
        table.replace(&d, "to O\"Hara").as_deref(),
        Some("to [NAME_1]")
    );
    assert_eq!(
        table.restore(r#"{"to":"[NAME_1]"}"#, true),
        r#"{"to":"O\"Hara"}"#
    );
}

#[test]
fn a_placeholder_split_over_chunks_is_restored_whole() {
    let p = privacy(Pseudonyms::default());
    p.hide("ada@example.com");
    let mut r = Restorer::default();
    let mut out = String::new();
    for chunk in ["Mail [", "EMA", "IL_", "1", "] now [sic] and [", "EMAIL_1"] {
        out.push_str(&r.push(&p, chunk));
    }
    assert_eq!(out, "Mail ada@example.com now [sic] and ");
    out.push_str(&r.finish(&p));
    assert_eq!(
        out, "Mail ada@example.com now [sic] and [EMAIL_1",
        "an unclosed end stays as it came"
    );
}

#[test]
fn names_the_user_marked_are_hidden_and_kept_with_the_table() {
    let p = privacy(Pseudonyms::default());
    let names = [
        "  Grace Hopper ".to_string(),
        String::new(),
        "x".repeat(101),
    ];
    assert_eq!(marked_names(&names), vec!["Grace Hopper".to_string()]);
    p.mark(&marked_names(&names));
    assert_eq!(
        p.hide("Ask Grace Hopper, not Grace."),
        "Ask [NAME_1], not Grace."
    );
    let again = privacy(Pseudonyms::from_bytes(&p.changed_table().unwrap()));
    assert_eq!(again.hide("Grace Hopper said"), "[NAME_1] said");
    assert_eq!(
        again.reveal("[NAME_1] wrote it", false),
        "Grace Hopper wrote it"
    );
}
