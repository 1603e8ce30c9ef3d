//! Arbitrary text as a configuration file: the loader must answer Ok or an error
//! that names a line within the file (or says it has none), and never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpmuxd::config::{Config, ConfigError};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text, "fuzz.toml", &Default::default()) {
        Ok(config) => assert!(!config.listen.is_empty()),
        Err(ConfigError::Invalid {
            place: Some((line, column)),
            ..
        }) => {
            assert!(line >= 1 && column >= 1);
            assert!(line <= text.lines().count().max(1) + 1);
        }
        Err(ConfigError::Invalid { place: None, .. }) => {}
        Err(ConfigError::Read { .. }) => {}
    }
});
