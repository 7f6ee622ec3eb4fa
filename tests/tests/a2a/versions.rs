//! The `A2A-Version` header, on both bindings: absent or empty means 0.3, and only 1.0 (any
//! patch) is spoken; every other version is refused with `VersionNotSupported` (HTTP 400).

use harness::TestResult;

use crate::support::{
    BINDINGS, Cluster, TASK_NOT_FOUND, TOKEN_A, VERSION_NOT_SUPPORTED, expect_error,
};

/// Calls `GetTask` with each of `versions` and expects `VersionNotSupported` for each.
async fn expect_refused(versions: &[Option<&str>]) -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        for version in versions.iter().copied() {
            let reply = alice
                .with_version(version)
                .get_task(binding, "no-such-task", None)
                .await?;
            expect_error(
                binding,
                reply,
                VERSION_NOT_SUPPORTED,
                400,
                &format!("A2A-Version {version:?}"),
            )?;
        }
    }
    Ok(())
}

/// No `A2A-Version`, or an empty one, is 0.3, which is not spoken.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_or_empty_version_is_refused_with_version_not_supported() -> TestResult {
    expect_refused(&[None, Some("")]).await
}

#[tokio::test(flavor = "multi_thread")]
async fn versions_other_than_1_0_are_refused_with_version_not_supported() -> TestResult {
    expect_refused(&[Some("0.3"), Some("99.0"), Some("1.1")]).await
}

/// `1.0.2` is 1.0: the call goes through (and finds no such task).
#[tokio::test(flavor = "multi_thread")]
async fn any_patch_of_1_0_is_spoken() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let patched = alice
            .with_version(Some("1.0.2"))
            .get_task(binding, "no-such-task", None)
            .await?;
        expect_error(binding, patched, TASK_NOT_FOUND, 404, "A2A-Version 1.0.2")?;
    }
    Ok(())
}
