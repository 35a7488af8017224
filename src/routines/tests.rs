use super::catalog::Catalog;
use crate::skills::manifest::AppManifest;

fn app(routines: &str) -> AppManifest {
    let yaml = format!(
        r#"
id: demo
name: Demo
skills:
  - id: find
    description: Finds.
    input: {{properties: {{query: {{type: string}}}}, required: [query]}}
    executor: {{builtin: web-search}}
    output: {{mode: passthrough, user_content: [x]}}
routines:
{routines}"#
    );
    serde_yaml_ng::from_str(&yaml).unwrap()
}

const ONE: &str = "  - {name: one, description: One., arguments: {type: object, properties: {}}}\n";
const TWO: &str = "  - {name: two, description: Two., arguments: {type: object, properties: {}}}\n";

fn lint(routines: &str, scripts: &[(&str, &str)]) -> Result<Catalog, String> {
    let apps = [app(routines)];
    Catalog::build(&apps, |_, name| {
        scripts
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t.to_string())
            .ok_or_else(|| "missing".to_string())
    })
    .map_err(|e| e.to_string())
}

#[test]
fn scripts_compile_and_their_calls_name_what_exists() {
    let ok = lint(
        &format!("{ONE}{TWO}"),
        &[
            ("one", r#"let r = run("demo.two", #{}); skill("demo-find", #{query: "x"}); emit("status", "s"); r"#),
            ("two", r#"ask_user("why?")"#),
        ],
    )
    .unwrap();
    assert_eq!(ok.all().len(), 2);
    assert_eq!(ok.find("demo-two").unwrap().full_id, "demo.two");
    assert_eq!(ok.find("demo.one").unwrap().tool, "demo-one");
}

#[test]
fn lint_refuses_bad_scripts_and_calls() {
    let cases = [
        (r#"let x = ;"#, "does not compile"),
        (r#"run("demo.nothing", #{})"#, "names nothing"),
        (r#"skill("demo-nothing", #{})"#, "names nothing"),
        (r#"emit("shout", "x")"#, "names nothing"),
    ];
    for (script, why) in cases {
        let err = lint(ONE, &[("one", script)]).err().unwrap();
        assert!(err.contains(why), "{script}: {err}");
    }
    let err = lint(
        "  - {name: find, description: Clash., arguments: {type: object}}\n",
        &[("find", "1")],
    )
    .err()
    .unwrap();
    assert!(err.contains("already a skill"), "{err}");
    let err = lint(
        "  - {name: one, description: X., arguments: {type: string}}\n",
        &[("one", "1")],
    )
    .err()
    .unwrap();
    assert!(err.contains("object schema"), "{err}");
}

#[test]
fn the_built_in_routines_lint() {
    let catalog = Catalog::load(std::path::Path::new("")).unwrap();
    let ids: Vec<_> = catalog.all().iter().map(|r| r.full_id.as_str()).collect();
    assert_eq!(ids, ["web.research", "web.plan_trip"]);
}
