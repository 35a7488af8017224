use super::*;
use crate::config::ModelEntry;

fn entry(id: &str, tier: u8, caps: &[Capability]) -> ModelEntry {
    ModelEntry {
        id: id.into(),
        name: None,
        base_url: None,
        api_key_env: None,
        api_key_vault: None,
        api_key: None,
        context_window: 32_000,
        capabilities: caps.to_vec(),
        cost_tier: tier,
    }
}

fn models() -> Models {
    let mut config = Config::defaults().unwrap();
    config.models.catalog = vec![
        entry("small", 1, &[Capability::Tools]),
        entry("eyes", 2, &[Capability::Tools, Capability::Vision]),
        entry("big", 3, &[Capability::Tools, Capability::Reasoning]),
    ];
    config.models.main = "small".into();
    let sim: Arc<dyn LlmClient> = Arc::new(llm::SimulatedClient::new(std::time::Duration::ZERO));
    Models::from_config(&config, sim).unwrap()
}

#[test]
fn selection_honours_complexity_capabilities_and_pins() {
    let m = models();
    let none = Needs::default();
    assert_eq!(
        m.choose(Complexity::Simple, &none, None).model.spec.id,
        "small"
    );
    assert_eq!(
        m.choose(Complexity::Complex, &none, None).model.spec.id,
        "big"
    );
    let vision = Needs {
        capabilities: vec![Capability::Vision],
    };
    assert_eq!(
        m.choose(Complexity::Simple, &vision, None).model.spec.id,
        "eyes"
    );
    assert_eq!(
        m.choose(Complexity::Complex, &vision, None).model.spec.id,
        "eyes"
    );
    let c = m.choose(Complexity::Complex, &none, Some("small"));
    assert_eq!(c.model.spec.id, "small");
    assert!(c.reason.contains("pinned"));
    let c = m.choose(Complexity::Simple, &none, Some("nope"));
    assert_eq!(c.model.spec.id, "small");
    assert!(c.reason.contains("not configured"));
}
