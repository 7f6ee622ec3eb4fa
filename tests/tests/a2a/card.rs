//! The agent cards: the strict A2A card (`/a2a/.well-known/agent-card.json`) has only the
//! schema's members and declares both bindings at 1.0, streaming and push notifications,
//! a bearer token, default modes and the suite's skills; it carries a strong validator and
//! answers a revalidation with 304; the Lucid card lists the same two interfaces after its own.

use harness::TestResult;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::{Cluster, skill_ids};

/// The strict card has no member the schema lacks, and a name, description and version.
#[tokio::test(flavor = "multi_thread")]
async fn the_strict_card_has_only_schema_members() -> TestResult {
    let cluster = Cluster::start().await?;
    let card = cluster.a2a_card().await?;
    let known = [
        "name",
        "description",
        "version",
        "supportedInterfaces",
        "capabilities",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
        "provider",
        "documentationUrl",
        "iconUrl",
        "securitySchemes",
        "securityRequirements",
        "signatures",
    ];
    let members = card.as_object().ok_or("the card is not an object")?;
    for member in members.keys() {
        assert!(
            known.contains(&member.as_str()),
            "the strict card has a member the schema lacks: {member}"
        );
    }
    for member in ["name", "description", "version"] {
        assert!(
            card[member].as_str().is_some_and(|text| !text.is_empty()),
            "{member}: {card}"
        );
    }
    Ok(())
}

/// The strict card's interfaces: JSON-RPC, then HTTP+JSON, both at protocol version 1.0.
#[tokio::test(flavor = "multi_thread")]
async fn the_strict_card_lists_both_bindings_at_version_1_0() -> TestResult {
    let cluster = Cluster::start().await?;
    let card = cluster.a2a_card().await?;
    let interfaces = card["supportedInterfaces"]
        .as_array()
        .ok_or("no supportedInterfaces")?;
    assert_eq!(interfaces.len(), 2, "{card}");
    assert_eq!(interfaces[0]["protocolBinding"], "JSONRPC");
    assert_eq!(
        interfaces[0]["url"],
        format!("{}/a2a/jsonrpc", cluster.base)
    );
    assert_eq!(interfaces[0]["protocolVersion"], "1.0");
    assert_eq!(interfaces[1]["protocolBinding"], "HTTP+JSON");
    assert_eq!(interfaces[1]["url"], format!("{}/a2a/v1", cluster.base));
    assert_eq!(interfaces[1]["protocolVersion"], "1.0");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_card_offers_streaming_and_push_notifications() -> TestResult {
    let cluster = Cluster::start().await?;
    let card = cluster.a2a_card().await?;
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["capabilities"]["pushNotifications"], true);
    Ok(())
}

/// A `bearer` HTTP scheme, and a security requirement naming it.
#[tokio::test(flavor = "multi_thread")]
async fn the_card_requires_a_bearer_token() -> TestResult {
    let cluster = Cluster::start().await?;
    let card = cluster.a2a_card().await?;
    let bearer = &card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"];
    assert!(
        bearer["scheme"]
            .as_str()
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("bearer")),
        "{card}"
    );
    let required = card["securityRequirements"].to_string();
    assert!(required.contains("bearer"), "{card}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_card_has_default_input_and_output_modes() -> TestResult {
    let cluster = Cluster::start().await?;
    let card = cluster.a2a_card().await?;
    for modes in ["defaultInputModes", "defaultOutputModes"] {
        assert!(
            card[modes]
                .as_array()
                .is_some_and(|modes| !modes.is_empty()),
            "{modes}: {card}"
        );
    }
    Ok(())
}

/// The skills the suite uses are listed, each with an id, name, description and tags.
#[tokio::test(flavor = "multi_thread")]
async fn the_card_lists_the_skills_with_ids_names_descriptions_and_tags() -> TestResult {
    let cluster = Cluster::start().await?;
    let card = cluster.a2a_card().await?;
    let skills = skill_ids(&card);
    for skill in ["tck", "count", "echo", "sleep"] {
        assert!(skills.contains(&skill.to_owned()), "{skill}: {skills:?}");
    }
    for skill in card["skills"].as_array().into_iter().flatten() {
        assert!(
            skill["id"].is_string()
                && skill["name"].is_string()
                && skill["description"].is_string()
                && skill["tags"].is_array(),
            "{skill}"
        );
    }
    Ok(())
}

/// The card carries a strong validator (an ETag) and a `Last-Modified` date, and answers a
/// revalidation with 304.
#[tokio::test(flavor = "multi_thread")]
async fn the_card_answers_a_revalidation_with_304() -> TestResult {
    let cluster = Cluster::start().await?;
    let url = format!("{}/a2a/.well-known/agent-card.json", cluster.base);
    let first = cluster.http.get(&url).send().await?;
    let modified = first
        .headers()
        .get(reqwest::header::LAST_MODIFIED)
        .ok_or("the A2A card has no Last-Modified")?
        .to_str()?
        .to_owned();
    assert!(
        modified.ends_with(" GMT") && modified.len() == 29,
        "{modified}"
    );
    let etag = first
        .headers()
        .get(reqwest::header::ETAG)
        .ok_or("the A2A card has no ETag")?
        .clone();
    let again = cluster
        .http
        .get(&url)
        .header(reqwest::header::IF_NONE_MATCH, etag)
        .send()
        .await?;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    Ok(())
}

/// The Lucid card (`/.well-known/agent-card.json`) lists the strict card's two interfaces
/// after its own.
#[tokio::test(flavor = "multi_thread")]
async fn the_lucid_card_lists_the_same_interfaces_after_its_own() -> TestResult {
    let cluster = Cluster::start().await?;
    let card = cluster.a2a_card().await?;
    let interfaces = card["supportedInterfaces"]
        .as_array()
        .ok_or("no supportedInterfaces")?;
    let lucid: Value = cluster
        .http
        .get(format!("{}/.well-known/agent-card.json", cluster.base))
        .send()
        .await?
        .json()
        .await?;
    let listed = lucid["supportedInterfaces"]
        .as_array()
        .ok_or("the Lucid card has no supportedInterfaces")?;
    assert_eq!(listed.len(), 3, "{lucid}");
    for (own, strict) in listed.iter().skip(1).zip(interfaces) {
        for field in ["url", "protocolBinding", "protocolVersion"] {
            assert_eq!(own[field], strict[field], "{field}: {lucid}");
        }
    }
    Ok(())
}
