// The enumerated settings of a run configuration and their config spellings: learning-rate
// schedule, precision, communication engine, activation checkpointing. Apart from config.h so that
// the components that take one (the communicator takes a CommBackend) need not see RunConfig.
#pragma once

#include "normlab/util/name_table.h"

namespace normlab {

enum class ScheduleKind { Cosine, Linear, Wsd, Constant };
enum class Precision { Auto, Bf16, Fp32, Fp64 };
enum class CommBackend { Auto, Mpi, Nccl };
enum class ActivationCheckpointing { None, Block, Selective };
enum class GradientReduce { PerMicroStep, PerStep };

// clang-format off
template <> struct EnumNames<ScheduleKind> {
  static constexpr NameRow<ScheduleKind> rows[] = {
    {ScheduleKind::Cosine, "cosine"}, {ScheduleKind::Linear, "linear"},
    {ScheduleKind::Wsd, "wsd"}, {ScheduleKind::Constant, "constant"}};
};
template <> struct EnumNames<Precision> {
  static constexpr NameRow<Precision> rows[] = {
    {Precision::Auto, "auto"}, {Precision::Bf16, "bf16"}, {Precision::Fp32, "fp32"},
    {Precision::Fp64, "fp64"}};
};
template <> struct EnumNames<ActivationCheckpointing> {
  static constexpr NameRow<ActivationCheckpointing> rows[] = {
    {ActivationCheckpointing::None, "none"}, {ActivationCheckpointing::Block, "block"}, {ActivationCheckpointing::Selective, "selective"}};
};
template <> struct EnumNames<CommBackend> {
  static constexpr NameRow<CommBackend> rows[] = {
    {CommBackend::Auto, "auto"}, {CommBackend::Mpi, "mpi"}, {CommBackend::Nccl, "nccl"}};
};
template <> struct EnumNames<GradientReduce> {
  static constexpr NameRow<GradientReduce> rows[] = {
    {GradientReduce::PerMicroStep, "per_micro_step"}, {GradientReduce::PerStep, "per_step"}};
};
// clang-format on

}  // namespace normlab
