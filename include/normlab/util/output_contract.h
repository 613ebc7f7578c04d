// The output contract that every command writing files follows (docs/reliability.md, "What a
// user already has is never destroyed"):
//
// - the output path is checked before any work (check_output_path): an empty one, one equal to
//   an input or inside one, and one inside a checkpoint folder or a token-shard folder, which
//   other runs read, are refused with one line naming the flag and the value;
// - a command replaces a file only when it wrote it in this invocation, when the user passed
//   --overwrite, or when the file is provably its own output from an earlier invocation of the
//   same command: the folder's ledger (.normlab-outputs.json) lists it with the digest it had
//   when it was written, and it has not changed since. Such a file is kept as NAME.prev (one
//   generation) and the command says so. Any other file of a name it writes stops the command
//   before any work, naming the files (OutputFiles).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "normlab/util/file_io.h"

namespace normlab {

/// An input of a command, for check_output_path: the flag and the path given.
struct OutputInput {
  std::string flag, path;
  /// The output may lie inside this input (a run folder given as --checkpoint, whose export
  /// goes into RUN/export); it may never be the input itself.
  bool may_contain_out = false;
};

/// What kind of protected folder `dir` is: "a checkpoint folder" when it holds the state.json
/// that checkpoint_save writes last beside a model*.safetensors, "a token-shard folder" when it
/// holds the index.json that data prepare writes beside a train-*.bin or val-*.bin shard, "a
/// run's checkpoints folder" for a checkpoints/ folder holding a step-N checkpoint folder; ""
/// otherwise (a state.json or an index.json alone, such as a web project's).
std::string protected_folder_kind(const std::string& dir);

/// Before any work: throws FileError with one line naming `flag` and `out` when `out` is empty,
/// is one of `inputs` or lies inside one (unless that input may contain it), or is, or lies
/// inside, a checkpoint or token-shard folder; `folder`: `out` names a folder, so an existing
/// path that is not one is refused too (check_output_folder), else an existing folder is.
/// `own_kind`: the kind of protected
/// folder that is the command's own output (data prepare's "a token-shard folder", which its
/// --overwrite rules govern). Nothing is created.
void check_output_path(const std::string& flag, const std::string& out,
                       const std::vector<OutputInput>& inputs, bool folder = true,
                       const std::string& own_kind = "");

/// Sets `path` (a file or a folder) aside under the first free name of PATH.prev, PATH.prev-2,
/// PATH.prev-3, ..., never replacing anything, and returns that name. `by_link` (files only):
/// PATH stays and the new name is a second link to it, as OutputFiles::keep_previous.
std::string keep_as_prev(const std::string& path, bool by_link = false);

/// The files one invocation of a command writes into its output folder, checked against what
/// the folder already holds:
///
///   OutputFiles out(dir, "analyze", overwrite);
///   out.claim({"diagnostics.jsonl"});   // before any work: refuses the files of someone else
///   ...                                  // the work
///   out.keep_previous();                 // own earlier outputs: kept as NAME.prev
///   write_file_atomic(dir + "/diagnostics.jsonl", ...);
///   out.record({"diagnostics.jsonl"});   // into the ledger, with their digests
///
/// Names are paths relative to the folder (no "..").
class OutputFiles {
 public:
  /// `command`: the kind of output recorded in the ledger ("export", "analyze", ...);
  /// `overwrite`: the user's --overwrite (every file of a claimed name may be replaced).
  OutputFiles(std::string folder, std::string command, bool overwrite, std::string flag = "--out");

  /// Throws FileError, before anything is changed, naming every claimed name that exists in
  /// the folder and is neither this command's own unchanged earlier output nor replaceable by
  /// --overwrite; a folder of a claimed name is refused even with --overwrite. The NAME.prev of
  /// an own earlier file must be free or own as well. Names claimed before are skipped, so a
  /// command claims what it surely writes before any work and what it finds it writes (an
  /// optional file) once it knows (StagedFiles::commit does).
  void claim(const std::vector<std::string>& names);

  /// The claimed names that exist now and are this command's own earlier output.
  const std::vector<std::string>& own() const { return own_; }
  /// The claimed names that exist now and are someone else's (only with --overwrite).
  const std::vector<std::string>& foreign() const { return foreign_; }

  /// Sets the own earlier outputs aside as NAME.prev, replacing an own earlier NAME.prev, and
  /// returns one line per file for the log. `by_link`: NAME stays and NAME.prev becomes a second
  /// link to it (for writers that replace a file by renaming a new one over it: the folder is
  /// whole at every moment); otherwise NAME is renamed (for writers that rewrite a file in
  /// place, such as plotting tools). `only`: these names alone (default: every claimed one).
  /// With --overwrite nothing is set aside. Each file is set aside once.
  std::vector<std::string> keep_previous(bool by_link = true,
                                         const std::vector<std::string>& only = {});

  /// Records `names` (written by this invocation; missing ones are skipped) as this command's
  /// output with their current digests, and the NAME.prev files set aside, in the ledger.
  void record(const std::vector<std::string>& names);

  /// Every line keep_previous returned so far, for the command's log or stderr.
  const std::vector<std::string>& notes() const { return notes_; }

  /// The ledger's file name inside an output folder.
  static constexpr const char* kLedger = ".normlab-outputs.json";

 private:
  struct Entry {
    std::string command;
    FileDigest digest;
  };
  std::map<std::string, Entry> read_ledger() const;
  bool is_own(const std::map<std::string, Entry>& ledger, const std::string& name) const;

  std::string folder_, command_, flag_;
  bool overwrite_;
  std::vector<std::string> claimed_, own_, foreign_, done_, prev_, notes_;
};

}  // namespace normlab
