//! `SendMessage` on both bindings: the TCK agent completes with its greeting and keeps the
//! message sent as the history's first; a context is made up when none is given and kept when
//! one is; artifacts of every kind (text, raw file, file by URL, data); a direct message
//! instead of a task; a rejected task; a named skill (`echo`) returning its data part.

use base64::Engine;
use harness::TestResult;
use serde_json::json;

use crate::support::{BINDINGS, Cluster, TOKEN_A, for_skill, ok, state, status_text, tck, unique};

#[tokio::test(flavor = "multi_thread")]
async fn a_message_completes_with_the_greeting_and_starts_the_history() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let request = tck("tck-complete-task");
        let sent_id = request["message"]["messageId"].clone();
        let task = alice.send_task(binding, request).await?;
        assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{task}");
        assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT", "{task}");
        assert_eq!(status_text(&task), "Hello from TCK", "{task}");
        assert_eq!(task["history"][0]["messageId"], sent_id, "{task}");
        assert_eq!(task["history"][0]["role"], "ROLE_USER", "{task}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_context_is_made_up_when_none_is_given_and_kept_when_one_is() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let task = alice.send_task(binding, tck("tck-complete-task")).await?;
        let generated = task["contextId"].as_str().unwrap_or_default();
        assert!(!generated.is_empty(), "a generated context ({binding:?})");
        let context = unique("ctx");
        let mut request = tck("tck-complete-task");
        request["message"]["contextId"] = json!(context);
        let kept = alice.send_task(binding, request).await?;
        assert_eq!(kept["contextId"], context.as_str(), "{kept}");
        assert_eq!(state(&kept), "TASK_STATE_COMPLETED", "{kept}");
        assert_ne!(kept["contextId"], generated, "{kept}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_returns_a_text_artifact() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let text = alice.send_task(binding, tck("tck-artifact-text")).await?;
        assert_eq!(state(&text), "TASK_STATE_COMPLETED", "{text}");
        assert_eq!(
            text["artifacts"][0]["parts"][0]["text"], "Generated text content",
            "{text}"
        );
    }
    Ok(())
}

/// A file artifact's bytes travel base64-encoded in `raw`, with a filename and media type.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_returns_a_file_artifact_with_its_bytes() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let file = alice.send_task(binding, tck("tck-artifact-file")).await?;
        let part = &file["artifacts"][0]["parts"][0];
        let raw = part["raw"]
            .as_str()
            .ok_or_else(|| format!("no raw part: {file}"))?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(raw)?;
        assert_eq!(bytes, b"Generated file content", "{file}");
        assert_eq!(part["filename"], "output.txt", "{file}");
        assert_eq!(part["mediaType"], "text/plain", "{file}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_returns_a_file_artifact_by_url() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let url = alice
            .send_task(binding, tck("tck-artifact-file-url"))
            .await?;
        assert_eq!(
            url["artifacts"][0]["parts"][0]["url"], "https://example.com/output.txt",
            "{url}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_returns_a_data_artifact() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let data = alice.send_task(binding, tck("tck-artifact-data")).await?;
        assert_eq!(
            data["artifacts"][0]["parts"][0]["data"],
            json!({"key": "value", "count": 42}),
            "{data}"
        );
    }
    Ok(())
}

/// The agent may answer a message with a message, and no task.
#[tokio::test(flavor = "multi_thread")]
async fn a_direct_message_is_answered_without_a_task() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let reply = ok(
            alice.send(binding, tck("tck-message-response")).await?,
            "tck-message-response",
        )?;
        assert!(reply.get("task").is_none(), "{reply}");
        assert_eq!(reply["message"]["role"], "ROLE_AGENT", "{reply}");
        assert_eq!(
            reply["message"]["parts"][0]["text"], "Direct message response",
            "{reply}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_task_ends_rejected() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let rejected = alice.send_task(binding, tck("tck-reject-task")).await?;
        assert_eq!(state(&rejected), "TASK_STATE_REJECTED", "{rejected}");
    }
    Ok(())
}

/// A named skill: `echo` returns its data part as the artifact.
#[tokio::test(flavor = "multi_thread")]
async fn a_named_skill_gets_the_data_part_and_returns_its_artifact() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let value = json!({"hello": [1, "two", {"three": 3.5}], "binding": binding.tag()});
        let echoed = alice
            .send_task(binding, for_skill("echo", json!({"data": value})))
            .await?;
        assert_eq!(state(&echoed), "TASK_STATE_COMPLETED", "{echoed}");
        assert_eq!(
            echoed["artifacts"][0]["parts"][0]["data"], value,
            "{echoed}"
        );
    }
    Ok(())
}
