//! ApiVersions: advertises exactly the table in `protocol::api_versions`.
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiVersionsResponse;

use crate::protocol::api_versions::SUPPORTED;
use crate::protocol::error::{code, ErrorCode};

pub fn handle(error: Option<ErrorCode>) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(code(error))
        .with_api_keys(
            SUPPORTED
                .iter()
                .map(|(api, lo, hi)| {
                    ApiVersion::default()
                        .with_api_key(*api as i16)
                        .with_min_version(*lo)
                        .with_max_version(*hi)
                })
                .collect(),
        )
}
