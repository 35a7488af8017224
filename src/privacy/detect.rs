//! Finding personal data in text: e-mail addresses, phone numbers, IBANs, payment card
//! numbers, IP addresses and configured names. Each candidate is cut out by a cheap scan
//! and confirmed by a well-kept validator (the address grammar, the numbering plans, the
//! IBAN check digits, the Luhn digit, the address parsers), so prose costs a pass over its
//! bytes and only candidates cost a parse.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::config::{PersonalData, PrivacyConfig};

/// A piece of personal data in a text: its byte range, kind and normal form (the same
/// value written differently has the same key: an IBAN without spaces, a phone number in
/// E.164, an address in lower case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub start: usize,
    pub end: usize,
    pub kind: PersonalData,
    pub key: String,
}

/// The configured detectors.
#[derive(Debug, Clone)]
pub struct Detector {
    kinds: Vec<PersonalData>,
    names: Vec<String>,
    region: Option<phonenumber::country::Id>,
    /// How a national number of the region is written (a cheap test before the parse).
    national: National,
}

/// How a region's national phone numbers begin.
#[derive(Debug, Clone)]
enum National {
    /// No region: national numbers are not looked for.
    None,
    /// The North American plan: ten digits (eleven with the leading 1).
    Nanp,
    /// With the region's trunk prefix (`0` in most of Europe).
    Prefix(String),
    /// A region without one: any digits.
    Any,
}

impl National {
    fn of(region: Option<phonenumber::country::Id>) -> Self {
        let Some(id) = region else {
            return National::None;
        };
        let Some(meta) = phonenumber::metadata::DATABASE.by_id(id.as_ref()) else {
            return National::Any;
        };
        match meta.national_prefix() {
            _ if meta.country_code() == 1 => National::Nanp,
            Some(prefix) => National::Prefix(prefix.to_string()),
            None => National::Any,
        }
    }

    /// Whether `candidate` (no `+`; `digits` of them) may be a national number.
    fn may_be(&self, candidate: &str, digits: usize) -> bool {
        match self {
            National::None => false,
            National::Nanp => {
                digits == 10 || (digits == 11 && candidate.trim_start_matches('(').starts_with('1'))
            }
            National::Prefix(p) => candidate.trim_start_matches('(').starts_with(p.as_str()),
            National::Any => true,
        }
    }
}

impl Detector {
    pub fn new(config: &PrivacyConfig) -> Self {
        let mut names: Vec<String> = config.names.iter().map(|n| n.trim().to_string()).collect();
        // The longest first: "Ada Lovelace" before "Ada".
        names.sort_by_key(|n| std::cmp::Reverse(n.len()));
        let region = config.phone_region.parse().ok();
        Self {
            kinds: config.pseudonymize.clone(),
            names,
            region,
            national: National::of(region),
        }
    }

    /// The detector of `config`, unless no kind is switched on.
    pub fn for_config(config: &PrivacyConfig) -> Option<std::sync::Arc<Self>> {
        (!config.pseudonymize.is_empty()).then(|| std::sync::Arc::new(Self::new(config)))
    }

    /// Whether `text` may hold anything the configured kinds find (a digit or an `@` for
    /// the patterned kinds; always, while names are configured): a cheap test before a
    /// scan.
    pub fn may_hold(&self, text: &str) -> bool {
        let names = self.on(PersonalData::Name) && !self.names.is_empty();
        let patterned = self.kinds.iter().any(|k| *k != PersonalData::Name);
        names || (patterned && text.bytes().any(|c| c.is_ascii_digit() || c == b'@'))
    }

    fn on(&self, kind: PersonalData) -> bool {
        self.kinds.contains(&kind)
    }

    /// Every piece of personal data in `text`, in order, none overlapping; `marked`: the
    /// names the user marked private in the chat (found whatever `name`'s switch says).
    pub fn find(&self, text: &str, marked: &[String]) -> Vec<Found> {
        let mut found = Vec::new();
        let b = text.as_bytes();
        // Prose without a digit or an `@` holds none of the patterned kinds.
        let patterned = b.iter().any(|c| c.is_ascii_digit() || *c == b'@');
        if patterned {
            if self.on(PersonalData::Email) {
                emails(text, &mut found);
            }
            if self.on(PersonalData::Iban) {
                ibans(text, &mut found);
            }
            if self.on(PersonalData::Card) {
                cards(text, &mut found);
            }
            if self.on(PersonalData::Ip) {
                ips(text, &mut found);
            }
            if self.on(PersonalData::Phone) {
                self.phones(text, &mut found);
            }
        }
        if self.on(PersonalData::Name) {
            names(&self.names, text, &mut found);
        }
        names(marked, text, &mut found);
        found.sort_by_key(|f| f.start);
        found
    }

    /// Phone numbers: a run of digits and the separators people write, confirmed by the
    /// numbering plan (international numbers always; national ones in `phone_region`).
    fn phones(&self, text: &str, found: &mut Vec<Found>) {
        let b = text.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let starts = (b[i] == b'+' || b[i] == b'(' || b[i].is_ascii_digit())
                && (i == 0 || !b[i - 1].is_ascii_alphanumeric());
            if !starts {
                i += 1;
                continue;
            }
            let end = phone_run(b, i);
            let candidate = &text[i..end];
            let digits = candidate.bytes().filter(u8::is_ascii_digit).count();
            let international = candidate.starts_with('+');
            if (7..=15).contains(&digits)
                && (international || self.national.may_be(candidate, digits))
                && !looks_like_date(candidate)
                && let Ok(number) = phonenumber::parse(self.region, candidate)
                && phonenumber::is_valid(&number)
            {
                let key = number.format().mode(phonenumber::Mode::E164).to_string();
                push(found, i, end, PersonalData::Phone, key);
            }
            i = end.max(i + 1);
        }
    }
}

/// Each of `list` (longest first) where it stands as whole words.
fn names(list: &[String], text: &str, found: &mut Vec<Found>) {
    for name in list {
        for (start, _) in text.match_indices(name.as_str()) {
            let end = start + name.len();
            if word_edge(text, start, end) {
                push(found, start, end, PersonalData::Name, name.clone());
            }
        }
    }
}

/// Records `f` unless it overlaps what was found before.
fn push(found: &mut Vec<Found>, start: usize, end: usize, kind: PersonalData, key: String) {
    if found.iter().any(|f| start < f.end && f.start < end) {
        return;
    }
    found.push(Found {
        start,
        end,
        kind,
        key,
    });
}

/// Whether `text[start..end]` is a whole word (no letter or digit joins it).
fn word_edge(text: &str, start: usize, end: usize) -> bool {
    let before = text[..start].chars().next_back();
    let after = text[end..].chars().next();
    !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
}

fn emails(text: &str, found: &mut Vec<Found>) {
    let b = text.as_bytes();
    let local = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+/=?^_`{|}~.-".contains(&c);
    let domain = |c: u8| c.is_ascii_alphanumeric() || c == b'.' || c == b'-';
    for (at, _) in text.match_indices('@') {
        let mut start = at;
        while start > 0 && local(b[start - 1]) {
            start -= 1;
        }
        let mut end = at + 1;
        while end < b.len() && domain(b[end]) {
            end += 1;
        }
        while end > at + 1 && matches!(b[end - 1], b'.' | b'-') {
            end -= 1;
        }
        let (user, host) = (&text[start..at], &text[at + 1..end]);
        if user.is_empty() || !host.contains('.') {
            continue;
        }
        let address = &text[start..end];
        if email_address::EmailAddress::is_valid(address) {
            push(
                found,
                start,
                end,
                PersonalData::Email,
                address.to_lowercase(),
            );
        }
    }
}

/// IBANs, electronic (`DE89370400440532013000`) or paper (`DE89 3704 0044 0532 0130 00`).
fn ibans(text: &str, found: &mut Vec<Found>) {
    let b = text.as_bytes();
    let upper_or_digit = |c: &u8| c.is_ascii_uppercase() || c.is_ascii_digit();
    for i in 0..b.len().saturating_sub(4) {
        let head = &b[i..i + 4];
        let starts = head[0].is_ascii_uppercase()
            && head[1].is_ascii_uppercase()
            && head[2].is_ascii_digit()
            && head[3].is_ascii_digit()
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric());
        if !starts {
            continue;
        }
        let mut electronic = String::new();
        let mut end = i;
        loop {
            let group = b[end..].iter().take_while(|c| upper_or_digit(c)).count();
            electronic.push_str(&text[end..end + group]);
            end += group;
            // Paper format: groups of four, one space apart, the last one shorter.
            let next = b.get(end + 1).is_some_and(upper_or_digit);
            if group != 4 || b.get(end) != Some(&b' ') || !next || electronic.len() > 34 {
                break;
            }
            end += 1;
        }
        if let Ok(iban) = electronic.parse::<iban::Iban>() {
            use iban::IbanLike;
            push(
                found,
                i,
                end,
                PersonalData::Iban,
                iban.electronic_str().to_string(),
            );
        }
    }
}

/// Payment card numbers: 13-19 digits, in groups split by single spaces or dashes, with a
/// valid Luhn digit.
fn cards(text: &str, found: &mut Vec<Found>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() || (i > 0 && b[i - 1].is_ascii_alphanumeric()) {
            i += 1;
            continue;
        }
        let mut digits = String::new();
        let mut end = i;
        while end < b.len() {
            if b[end].is_ascii_digit() {
                digits.push(b[end] as char);
                end += 1;
            } else if matches!(b[end], b' ' | b'-')
                && b.get(end + 1).is_some_and(u8::is_ascii_digit)
            {
                end += 1;
            } else {
                break;
            }
        }
        let joined = b.get(end).is_some_and(u8::is_ascii_alphanumeric);
        if (13..=19).contains(&digits.len()) && !joined && luhn::valid(&digits) {
            push(found, i, end, PersonalData::Card, digits);
        }
        i = end;
    }
}

/// IPv4 and IPv6 addresses: a token of the characters an address uses, parsed by the
/// standard library.
fn ips(text: &str, found: &mut Vec<Found>) {
    let b = text.as_bytes();
    let part = |c: u8| c.is_ascii_hexdigit() || c == b'.' || c == b':';
    let mut i = 0;
    while i < b.len() {
        if !part(b[i]) || (i > 0 && b[i - 1].is_ascii_alphanumeric()) {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < b.len() && part(b[end]) {
            end += 1;
        }
        // A sentence's full stop or colon is not part of the address.
        let mut stop = end;
        while stop > i && matches!(b[stop - 1], b'.' | b':') && !text[i..stop].ends_with("::") {
            stop -= 1;
        }
        let token = &text[i..stop];
        let joined = b.get(end).is_some_and(u8::is_ascii_alphanumeric);
        if !joined {
            let key = if token.contains(':') {
                token.parse::<Ipv6Addr>().ok().map(|a| a.to_string())
            } else if token.bytes().filter(|c| *c == b'.').count() == 3 {
                token.parse::<Ipv4Addr>().ok().map(|a| a.to_string())
            } else {
                None
            };
            if let Some(key) = key {
                push(found, i, stop, PersonalData::Ip, key);
            }
        }
        i = end;
    }
}

/// The end of a phone-number-shaped run from `i`: digits and single separators (space,
/// dash, dot, slash, parentheses), a leading `+`; trailing separators left out.
fn phone_run(b: &[u8], i: usize) -> usize {
    let mut end = i + 1;
    let mut digits = usize::from(b[i].is_ascii_digit());
    while end < b.len() && digits <= 17 {
        let c = b[end];
        if c.is_ascii_digit() {
            digits += 1;
        } else if !(matches!(c, b' ' | b'-' | b'.' | b'/' | b'(' | b')')
            && b.get(end + 1)
                .is_some_and(|n| n.is_ascii_digit() || *n == b'('))
        {
            break;
        }
        end += 1;
    }
    while end > i && !b[end - 1].is_ascii_digit() {
        end -= 1;
    }
    end
}

/// `2026-11-27`, `27.11.2026`, `11/27/2026`: dates, not numbers to call.
fn looks_like_date(candidate: &str) -> bool {
    let groups: Vec<&str> = candidate.split(['-', '.', '/']).collect();
    groups.len() == 3
        && groups.iter().all(|g| g.bytes().all(|c| c.is_ascii_digit()))
        && groups.iter().any(|g| g.len() == 4)
}

#[cfg(test)]
mod tests;
