use super::*;

fn parse(yaml: &str) -> Result<(), String> {
    let app: AppManifest = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
    lint(&[("t.yml".into(), app)]).map_err(|e| e.to_string())
}

const BASE: &str = r#"
id: demo
name: Demo
skills:
  - id: find
    description: Finds things.
    input: {properties: {query: {type: string}}, required: [query]}
    executor: {http: {url: "http://127.0.0.1:1/find", timeout: 5s}}
    output:
      mode: template
      agent_data:
        url: {type: string, format: url}
        rank: {type: integer}
      user_content: [snippet]
      template: "{count} results, first {url}"
"#;

#[test]
fn the_built_in_manifests_lint_clean() {
    let apps = load(Path::new("")).unwrap();
    assert!(apps.iter().any(|a| a.id == "web"));
}

#[test]
fn settings_memories_categories_are_linted() {
    let with = |schema: &str| {
        format!(
            "{BASE}settings_memories:\n  categories:\n    - {{id: trips, title: Trips, \
             description: Planned trips, schema: {schema}}}\n"
        )
    };
    parse(&with("{type: object, properties: {to: {type: string}}}")).unwrap();
    // Not a JSON Schema (an unknown type): refused, naming the category.
    let err = parse(&with("{type: objcet}")).unwrap_err();
    assert!(
        err.contains("t.yml") && err.contains("`trips`") && err.contains("objcet"),
        "{err}"
    );
    let bare = "id: empty\nname: Empty\n";
    assert!(
        parse(bare)
            .unwrap_err()
            .contains("no skills, no mcp server and no settings_memories")
    );
}

#[test]
fn a_good_manifest_passes() {
    parse(BASE).unwrap();
    parse(&format!(
        "{BASE}focus_modes:\n  - {{id: deep, title: Deep, instruction: Go deep., tools: [demo-find]}}\n"
    ))
    .unwrap();
}

#[test]
fn lint_errors_are_precise() {
    let cases = [
        (
            BASE.replace("{type: string, format: url}", "{type: string}"),
            "agent_data.url is an unconstrained string",
        ),
        (
            BASE.replace(
                "{query: {type: string}}",
                "{query: {type: string}, id: {type: integer}}",
            ),
            "input declares `id`",
        ),
        (
            BASE.replace("first {url}", "first {title}"),
            "template uses `{title}`",
        ),
        (
            BASE.replace("mode: template", "mode: passthrough"),
            "passthrough",
        ),
        (
            BASE.replace("http://127.0.0.1:1/find", "ftp://x"),
            "not an http(s) URL",
        ),
        (BASE.replace("id: find", "id: Find-It"), "skill id"),
        (
            format!(
                "{BASE}focus_modes:\n  - {{id: deep, title: Deep, instruction: Go deep., tools: [demo-lose]}}\n"
            ),
            "focus mode `demo-deep`: tool `demo-lose` is not a skill",
        ),
        (
            BASE.replace("format: url}", "pattern: \"(\"}"),
            "pattern does not compile",
        ),
        (
            BASE.replace("format: url}", "pattern: \"[A-Za-z_-]{1,80}\"}"),
            "pattern admits free text",
        ),
    ];
    for (yaml, expected) in cases {
        let err = parse(&yaml).unwrap_err();
        assert!(err.contains(expected), "{err} should mention {expected}");
        assert!(err.contains("t.yml") && err.contains("demo-"), "{err}");
    }
}
