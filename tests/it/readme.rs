//! What the README says its commands are, checked against what runs them, on every `cargo
//! test` (scripts/check_readme.py runs the serve command and the console examples themselves,
//! last in scripts/test.sh, because it needs the release build):
//! - its first ```sh block holds two commands, and the second is a line of `.ci/run`;
//! - each command Contributing says `scripts/test.sh` runs is a line of scripts/test.sh as
//!   written (`bash <script>` for a script), so a reader copying one runs what CI runs.

use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The lines of `text`, trimmed, with runs of whitespace as one space.
fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// The README's first ```sh block's commands (comments and blank lines left out).
fn first_sh_block(readme: &str) -> Vec<String> {
    let start = readme.find("\n```sh\n").expect("a ```sh block") + "\n```sh\n".len();
    let end = start + readme[start..].find("\n```").expect("the block ends");
    lines(&readme[start..end])
        .into_iter()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn the_readme_test_command_is_what_ci_runs() {
    let commands = first_sh_block(&read("README.md"));
    assert_eq!(commands.len(), 2, "serve, then test: {commands:?}");
    let ci = lines(&read(".ci/run"));
    assert!(
        ci.contains(&commands[1]),
        ".ci/run does not run `{}`",
        commands[1]
    );
}

/// The code spans of `text`, whitespace (line breaks included) as one space.
fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn contributing_names_the_commands_test_sh_runs_as_written() {
    let readme = read("README.md");
    let contributing = &readme[readme.find("\n## Contributing").expect("Contributing")..];
    let from = contributing
        .find("then runs")
        .expect("Contributing says what scripts/test.sh runs");
    let to = from
        + contributing[from..]
            .find("What it installs")
            .expect("...then what it installs");
    let spans = code_spans(&contributing[from..to]);
    let script = lines(&read("scripts/test.sh"));
    let mut checked = 0;
    for span in &spans {
        let command = if span.ends_with(".sh") {
            format!("bash {span}")
        } else if span.starts_with("cargo ") || span.contains("sluice ") {
            span.clone()
        } else {
            continue; // a path such as `tests/python`, or a tool run through the venv
        };
        assert!(
            script.contains(&command),
            "README's Contributing says scripts/test.sh runs `{command}`; it does not, as written"
        );
        checked += 1;
    }
    // fmt, clippy, build, test, check, and the scripts: a parse that finds none checks nothing.
    assert!(checked >= 8, "only {checked} commands found in {spans:?}");
}
