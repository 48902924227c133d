//! The fixture table: each file under `tests/fixtures/config_errors/` and the errors it must
//! produce.

/// `(fixture, ["line:column: message", ...])`: every error the file must produce, in order.
pub const CASES: &[(&str, &[&str])] = &[
    (
        "unknown_key.yaml",
        &[
            "5:5: unknown key 'ratelimit' (expected one of: key, value, rate_limit, rate_limits, \
           descriptors, shadow_mode, detailed_metric, value_to_metric, share_threshold, quota_mode, \
           metadata)",
        ],
    ),
    (
        "type_error_and_more.yaml",
        &[
            "5:51: invalid u32: expected a whole number from 0 to 4294967295",
            "7:78: invalid u32: expected a whole number from 0 to 4294967295",
            "9:24: invalid rate limit unit 'fortnight' (expected second, minute, hour, day, week, \
             month or year)",
            "9:54: invalid u32: expected a whole number from 0 to 4294967295",
        ],
    ),
    (
        "unknown_keys_and_more.yaml",
        &[
            "5:5: unknown key 'ratelimit' (expected one of: key, value, rate_limit, rate_limits, \
             descriptors, shadow_mode, detailed_metric, value_to_metric, share_threshold, \
             quota_mode, metadata)",
            "7:24: invalid rate limit unit 'fortnight' (expected second, minute, hour, day, week, \
             month or year)",
            "9:54: unknown key 'algoritm' (expected one of: requests_per_unit, unit, unlimited, \
             name, replaces, charge, on_store_error, window, algorithm, max_in_flight, lease_time, \
             burst, precision, align, timezone)",
            "9:81: replaces entry must have a non-empty name",
            "9:82: unknown key 'nam' (expected one of: name)",
            "10:5: duplicate descriptor composite key 'unknown_keys_and_more.a'",
            "11:1: unknown key 'shadow' (expected one of: domain, descriptors, allow_refunds, \
             allow_reservations, on_store_error, redis_hash_tag, allow_overrides)",
        ],
    ),
    (
        "unknown_top_level_key.yaml",
        &["2:1: unknown key 'descriptor' (expected one of: domain, descriptors, allow_refunds, \
           allow_reservations, on_store_error, redis_hash_tag, allow_overrides)"],
    ),
    (
        "empty_domain.yaml",
        &["1:9: config file cannot have empty domain"],
    ),
    (
        "missing_domain.yaml",
        &["1:1: config file cannot have empty domain"],
    ),
    (
        "empty_file.yaml",
        &["1:1: config file cannot have empty domain"],
    ),
    ("empty_key.yaml", &["3:10: descriptor has empty key"]),
    ("missing_key.yaml", &["3:5: descriptor has empty key"]),
    (
        "duplicate_descriptor.yaml",
        &["6:5: duplicate descriptor composite key 'duplicate_descriptor.k_v'"],
    ),
    (
        "duplicate_nested_default.yaml",
        &["8:9: duplicate descriptor composite key 'duplicate_nested_default.outer_o.inner'"],
    ),
    (
        "duplicate_wildcard.yaml",
        &["5:5: duplicate descriptor composite key 'duplicate_wildcard.path_/api/*'"],
    ),
    (
        "duplicate_map_key.yaml",
        &["5:5: duplicate key 'rate_limit' in one map"],
    ),
    (
        "bad_unit.yaml",
        &[
            "5:13: invalid rate limit unit 'fortnight' (expected second, minute, hour, day, week, \
           month or year)",
        ],
    ),
    (
        "missing_unit.yaml",
        &["5:7: rate_limit needs a unit (second, minute, hour, day, week, month or year)"],
    ),
    (
        "unit_with_unlimited.yaml",
        &["6:13: should not specify rate limit unit when unlimited"],
    ),
    (
        "replaces_itself.yaml",
        &["9:17: rate limit 'mine' cannot replace itself"],
    ),
    (
        "replaces_empty_name.yaml",
        &["9:11: replaces entry must have a non-empty name"],
    ),
    (
        "non_string_key.yaml",
        &["4:7: expected a string here (keys and values must be strings)"],
    ),
    (
        "non_map_list_item.yaml",
        &["5:5: expected a map here (descriptors and rate_limit are maps of key: value)"],
    ),
    (
        "share_threshold_without_wildcard.yaml",
        &[
            "5:22: share_threshold can only be used with a wildcard value (containing '*'), but \
           'share_threshold_without_wildcard.k_v' has none",
        ],
    ),
    (
        "malformed_yaml.yaml",
        &["4:4: while parsing a block collection, did not find expected '-' indicator"],
    ),
    (
        // A syntax error ends the typed parse, but the unknown keys above it are still found.
        "syntax_error_after_unknown_key.yaml",
        &[
            "4:5: unknown key 'ratelimit' (expected one of: key, value, rate_limit, rate_limits, \
           descriptors, shadow_mode, detailed_metric, value_to_metric, share_threshold, quota_mode, \
           metadata)",
            "8:8: while parsing a flow mapping, did not find expected ',' or '}'",
        ],
    ),
    (
        "fractional_requests.yaml",
        &["4:51: invalid u32: expected a whole number from 0 to 4294967295"],
    ),
    (
        "metadata_not_a_map.yaml",
        &["4:15: metadata must be a map of key: value"],
    ),
    (
        "invalid_charge.yaml",
        &["4:62: invalid charge 'sometimes' (expected always or if_admitted)"],
    ),
    (
        "invalid_store_settings.yaml",
        &[
            "2:17: invalid on_store_error 'closed' (expected unavailable, allow, deny or local)",
            "3:17: invalid redis_hash_tag 'everything' (expected descriptor or domain)",
            "6:70: invalid on_store_error 'open' (expected unavailable, allow, deny or local)",
        ],
    ),
    (
        "concurrency_with_a_rate.yaml",
        &[
            "5:79: concurrency limits requests in flight, not a rate: use max_in_flight instead \
             of requests_per_unit",
            "5:94: invalid lease_time 'soon' (expected a number and us, ms, s, m, h or d, e.g. \
             250ms, 1.5s, 2h, 7d)",
            "7:17: concurrency needs max_in_flight (the most requests in flight; 0 blocks every \
             request)",
        ],
    ),
    (
        "several_errors.yaml",
        &[
            "8:9: duplicate descriptor composite key 'several_errors.a.b'",
            "9:28: invalid rate limit unit 'parsec' (expected second, minute, hour, day, week, \
             month or year)",
            "15:25: rate limit 'c' cannot replace itself",
            "16:10: descriptor has empty key",
        ],
    ),
    // The algorithm keys: what one limit cannot say, each where it is written.
    (
        "algorithm_burst_on_fixed_window.yaml",
        &[
            "4:61: burst applies to token_bucket, leaky_bucket and gcra, not to fixed_window",
        ],
    ),
    (
        "algorithm_precision_on_sliding_log.yaml",
        &[
            "4:89: precision applies to sliding_window only, not to sliding_log",
        ],
    ),
    (
        "algorithm_sliding_log_limit_too_large.yaml",
        &[
            "4:37: sliding_log keeps one timestamp per request, and 50000 is more than the 10000 it keeps per key; use algorithm: sliding_window for large limits",
        ],
    ),
    (
        "algorithm_unknown_timezone.yaml",
        &[
            "4:78: unknown time zone 'Mars/Olympus' (expected an IANA name such as Asia/Shanghai or UTC)",
        ],
    ),
    (
        "algorithm_timezone_without_calendar.yaml",
        &[
            "4:61: timezone applies only with align: calendar",
        ],
    ),
    (
        "algorithm_calendar_with_a_window.yaml",
        &[
            "4:59: align: calendar needs a unit of hour, day, week, month or year (not a window or a shorter unit)",
        ],
    ),
    (
        "algorithm_calendar_on_gcra.yaml",
        &[
            "4:75: align: calendar applies to fixed_window and distinct, not to gcra",
        ],
    ),
    (
        "algorithm_unit_and_window.yaml",
        &[
            "4:62: use either unit or window, not both",
        ],
    ),
    (
        "algorithm_invalid_window.yaml",
        &[
            "4:48: invalid window '3 seconds' (expected a number and us, ms, s, m, h or d, e.g. 250ms, 1.5s, 2h, 7d)",
        ],
    ),
    (
        "algorithm_unknown_algorithm.yaml",
        &[
            "4:65: invalid algorithm 'lottery' (expected fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket, gcra, distinct or concurrency)",
        ],
    ),
    (
        "algorithm_precision_does_not_divide_window.yaml",
        &[
            "4:37: a window of 1000000 µs cannot be split into 3 sub-windows of whole microseconds; choose a precision that divides it",
        ],
    ),
    (
        "algorithm_gcra_burst_too_large.yaml",
        &[
            "4:37: burst 4294967291 with 4294967291 requests per 31536000000000 µs needs more than 2^51 units of exact arithmetic (burst × window / gcd(window, requests_per_unit)); lower burst, or pick a requests_per_unit that divides the window more evenly",
        ],
    ),
    (
        "algorithm_burst_without_refill.yaml",
        &[
            "4:37: burst needs requests_per_unit above zero (nothing would refill the bucket)",
        ],
    ),
    (
        "algorithm_concurrency_without_max_in_flight.yaml",
        &[
            "4:17: concurrency needs max_in_flight (the most requests in flight; 0 blocks every request)",
        ],
    ),
    (
        "algorithm_concurrency_with_rate_and_unit.yaml",
        &[
            "4:79: concurrency limits requests in flight, not a rate: use max_in_flight instead of requests_per_unit",
            "4:88: concurrency has no unit: a lease lasts until it is released, or at most lease_time",
        ],
    ),
    (
        "algorithm_concurrency_with_a_window.yaml",
        &[
            "4:68: concurrency has no window: a lease lasts until it is released, or at most lease_time",
        ],
    ),
    (
        "algorithm_concurrency_negative_max_in_flight.yaml",
        &[
            "4:57: invalid u32: expected a whole number from 0 to 4294967295",
        ],
    ),
    (
        "algorithm_concurrency_invalid_lease_time.yaml",
        &[
            "4:72: invalid lease_time 'forever' (expected a number and us, ms, s, m, h or d, e.g. 250ms, 1.5s, 2h, 7d)",
        ],
    ),
    (
        "algorithm_burst_on_concurrency.yaml",
        &[
            "4:67: burst applies to token_bucket, leaky_bucket and gcra, not to concurrency",
        ],
    ),
    (
        "algorithm_concurrency_keys_on_fixed_window.yaml",
        &[
            "4:69: max_in_flight applies to concurrency only, not to fixed_window",
            "4:84: lease_time applies to concurrency only, not to fixed_window",
        ],
    ),
];
