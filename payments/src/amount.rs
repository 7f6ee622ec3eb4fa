//! Prices are decimal USDC strings ("0.001"); requirements carry atomic units ("1000").

use alloy_primitives::U256;

use crate::network::USDC_DECIMALS;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    #[error("amount {0:?} is not a decimal number like 0.001")]
    NotDecimal(String),
    #[error("amount {0:?} has more than {USDC_DECIMALS} decimal places")]
    TooPrecise(String),
    #[error("amount {0:?} must be greater than zero")]
    NotPositive(String),
}

/// `"0.001"` -> `1000` (USDC has six decimals). Only plain decimals: no sign, exponent or spaces
/// inside; at least one digit; a positive result.
pub fn to_atomic(decimal: &str) -> Result<U256, AmountError> {
    let text = decimal.trim();
    let bad = || AmountError::NotDecimal(text.to_owned());
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (text, ""),
    };
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return Err(bad());
    }
    if fraction.len() > USDC_DECIMALS as usize {
        return Err(AmountError::TooPrecise(text.to_owned()));
    }
    let padded = format!("{whole}{fraction:0<width$}", width = USDC_DECIMALS as usize);
    let atomic = U256::from_str_radix(&padded, 10).map_err(|_| bad())?;
    if atomic.is_zero() {
        return Err(AmountError::NotPositive(text.to_owned()));
    }
    Ok(atomic)
}

/// `1000` -> `"0.001"`: the shortest decimal, for messages and spend caps.
pub fn to_decimal(atomic: U256) -> String {
    let scale = U256::from(10u64).pow(U256::from(USDC_DECIMALS));
    let whole = atomic / scale;
    let fraction = atomic % scale;
    if fraction.is_zero() {
        return whole.to_string();
    }
    let fraction = format!(
        "{:0>width$}",
        fraction.to_string(),
        width = USDC_DECIMALS as usize
    );
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_decimals() {
        for (text, atomic) in [
            ("0.001", 1000u64),
            ("1", 1_000_000),
            ("1.5", 1_500_000),
            (".5", 500_000),
            ("2.", 2_000_000),
            (" 0.000001 ", 1),
        ] {
            assert_eq!(to_atomic(text), Ok(U256::from(atomic)), "{text}");
        }
        assert_eq!(to_decimal(U256::from(1000u64)), "0.001");
        assert_eq!(to_decimal(U256::from(1_500_000u64)), "1.5");
        assert_eq!(to_decimal(U256::from(2_000_000u64)), "2");
    }

    #[test]
    fn refuses_anything_else() {
        for text in [
            "", ".", "-1", "1e3", "0", "0.000", "1,5", "0x10", "1.2.3", "+1", "1 000",
        ] {
            assert!(to_atomic(text).is_err(), "{text:?}");
        }
        assert!(matches!(
            to_atomic("0.0000001"),
            Err(AmountError::TooPrecise(_))
        ));
    }
}
