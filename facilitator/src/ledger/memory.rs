//! [`MemoryLedger`]: balances and spent nonces in one process, behind one `Mutex` (held for a
//! few map operations, never across an await), which is what makes a settlement atomic here.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use alloy_primitives::{Address, U256};
use async_trait::async_trait;
use payments::NonceKey;

use super::{Ledger, LedgerError, SettleOutcome, Transfer};

#[derive(Debug, Default)]
pub struct MemoryLedger {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    balances: HashMap<Address, U256>,
    /// Spent nonces and the amount each settled.
    spent: HashMap<NonceKey, U256>,
}

impl MemoryLedger {
    pub fn new() -> Self {
        MemoryLedger::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update below checks before it writes, so a panicking holder cannot have left
        // a half-applied settlement behind.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Ledger for MemoryLedger {
    async fn balance(&self, address: Address) -> Result<U256, LedgerError> {
        Ok(self
            .lock()
            .balances
            .get(&address)
            .copied()
            .unwrap_or_default())
    }

    async fn nonce_used(&self, key: &NonceKey) -> Result<bool, LedgerError> {
        Ok(self.lock().spent.contains_key(key))
    }

    async fn settled_amount(&self, key: &NonceKey) -> Result<Option<U256>, LedgerError> {
        Ok(self.lock().spent.get(key).copied())
    }

    async fn credit(&self, address: Address, amount: U256) -> Result<U256, LedgerError> {
        let mut state = self.lock();
        let balance = state.balances.entry(address).or_default();
        *balance = balance.checked_add(amount).ok_or(LedgerError::TooLarge)?;
        Ok(*balance)
    }

    async fn fund_if_absent(&self, address: Address, amount: U256) -> Result<bool, LedgerError> {
        let mut state = self.lock();
        if state.balances.contains_key(&address) {
            return Ok(false);
        }
        state.balances.insert(address, amount);
        Ok(true)
    }

    async fn settle(&self, transfer: &Transfer) -> Result<SettleOutcome, LedgerError> {
        let mut state = self.lock();
        if state.spent.contains_key(&transfer.key) {
            return Ok(SettleOutcome::NonceUsed);
        }
        let from_balance = state
            .balances
            .get(&transfer.from)
            .copied()
            .unwrap_or_default();
        let Some(debited) = from_balance.checked_sub(transfer.amount) else {
            return Ok(SettleOutcome::InsufficientFunds);
        };
        // Computed before anything is written: a payee overflow must move nothing.
        let to_balance = if transfer.to == transfer.from {
            debited
        } else {
            state
                .balances
                .get(&transfer.to)
                .copied()
                .unwrap_or_default()
        };
        let credited = to_balance
            .checked_add(transfer.amount)
            .ok_or(LedgerError::TooLarge)?;
        state.spent.insert(transfer.key.clone(), transfer.amount);
        state.balances.insert(transfer.from, debited);
        state.balances.insert(transfer.to, credited);
        Ok(SettleOutcome::Settled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::B256;

    fn transfer(amount: u64) -> Transfer {
        Transfer {
            key: NonceKey {
                chain_id: 84532,
                asset: Address::repeat_byte(9),
                from: Address::repeat_byte(1),
                nonce: B256::repeat_byte(7),
            },
            from: Address::repeat_byte(1),
            to: Address::repeat_byte(2),
            amount: U256::from(amount),
        }
    }

    #[tokio::test]
    async fn settles_once_and_only_when_funded() -> Result<(), LedgerError> {
        let ledger = MemoryLedger::new();
        let from = Address::repeat_byte(1);
        let to = Address::repeat_byte(2);
        assert_eq!(
            ledger.settle(&transfer(10)).await?,
            SettleOutcome::InsufficientFunds
        );
        assert!(!ledger.nonce_used(&transfer(10).key).await?);
        assert!(ledger.fund_if_absent(from, U256::from(100u64)).await?);
        assert!(!ledger.fund_if_absent(from, U256::from(5u64)).await?);
        assert_eq!(ledger.settle(&transfer(10)).await?, SettleOutcome::Settled);
        assert_eq!(
            ledger.settle(&transfer(10)).await?,
            SettleOutcome::NonceUsed
        );
        assert!(ledger.nonce_used(&transfer(10).key).await?);
        assert_eq!(
            ledger.settled_amount(&transfer(10).key).await?,
            Some(U256::from(10u64))
        );
        assert_eq!(ledger.balance(from).await?, U256::from(90u64));
        assert_eq!(ledger.balance(to).await?, U256::from(10u64));
        assert_eq!(
            ledger.credit(to, U256::from(5u64)).await?,
            U256::from(15u64)
        );
        Ok(())
    }

    #[tokio::test]
    async fn paying_oneself_keeps_the_balance() -> Result<(), LedgerError> {
        let ledger = MemoryLedger::new();
        let mut own = transfer(10);
        own.to = own.from;
        ledger.credit(own.from, U256::from(10u64)).await?;
        assert_eq!(ledger.settle(&own).await?, SettleOutcome::Settled);
        assert_eq!(ledger.balance(own.from).await?, U256::from(10u64));
        Ok(())
    }
}
